"""DocPC hits as LlamaIndex nodes: one ``ImageNode`` per document, whatever image it carries."""

from __future__ import annotations

from typing import Any

from docpc_retrievers.retrievers import Hit, b64_png
from llama_index.core.schema import ImageNode, NodeRelationship, NodeWithScore, RelatedNodeInfo

from ._common import EXCLUDED_EMBED_METADATA_KEYS, EXCLUDED_LLM_METADATA_KEYS

__all__ = ["hit_to_nodes"]


def _node(node_id: str, text: str, image: bytes | None, mime: str | None, metadata: dict[str, Any], doc_id: str) -> ImageNode:
    return ImageNode(
        id_=node_id, text=text, image=b64_png(image) if image is not None else None,
        image_mimetype=mime if image is not None else None, metadata=metadata,
        excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
        excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )


def hit_to_nodes(hit: Hit) -> list[NodeWithScore]:
    """One node per document hit: its image is the grid, the evidence picture, or (``return_images="pages"``)
    the page behind most of the score, with every selected page in ``page_images_base64`` (left out of LLM
    and embedding text) and their numbers in ``page_numbers``."""
    metadata = dict(hit.metadata)
    if hit.pages:
        metadata["page_images_base64"] = [b64_png(data) for _, data, _ in hit.pages]
    node = _node(hit.id, hit.text, hit.image, hit.image_mime_type, metadata, hit.id)
    return [NodeWithScore(node=node, score=hit.score)]
