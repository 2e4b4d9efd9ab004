"""Multi-vector encoders: the protocol, model families, checkpoint resolution and the colpali-engine implementation.

Importing this package stays cheap: torch, transformers and colpali-engine load
only when an encoder is built.
"""

from docpc_retrievers.encoders.checkpoints import detect_family
from docpc_retrievers.encoders.colpali import ColPaliEncoder, import_colpali_models, load_encoder, pick_device, pick_dtype
from docpc_retrievers.encoders.families import DEFAULT_MODEL, SUPPORTED_FAMILIES
from docpc_retrievers.encoders.protocol import EncodedImage, Encoder

__all__ = [
    "DEFAULT_MODEL",
    "SUPPORTED_FAMILIES",
    "ColPaliEncoder",
    "EncodedImage",
    "Encoder",
    "detect_family",
    "import_colpali_models",
    "load_encoder",
    "pick_device",
    "pick_dtype",
]
