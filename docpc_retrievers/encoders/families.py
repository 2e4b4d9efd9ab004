"""Model families colpali-engine can load, and how each is recognised from a checkpoint's config."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


from docpc_retrievers.errors import ModelLoadError

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

#: Checkpoint used when none is given.
DEFAULT_MODEL = "vidore/colqwen2-v1.0"

# --------------------------------------------------------------------------- families


@dataclass(frozen=True)
class _Family:
    """How one colpali-engine model family is recognised and loaded."""

    name: str
    model_class: str
    processor_class: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    dynamic_resolution: bool  # Qwen-style: max_pixels, image_grid_thw, row-major merged patch grid
    square_grid: bool = False  # PaliGemma-style: the image resized to a square, one block of side x side tokens


_FAMILIES: dict[str, _Family] = {
    f.name: f
    for f in (
        _Family("colqwen2", "ColQwen2", "ColQwen2Processor", ("qwen2_vl",), ("ColQwen2",), True),
        _Family("colqwen2_5", "ColQwen2_5", "ColQwen2_5_Processor", ("qwen2_5_vl",), ("ColQwen2_5",), True),
        _Family("colqwen3", "ColQwen3", "ColQwen3Processor", ("qwen3_vl",), ("ColQwen3",), True),
        _Family("colqwen3_5", "ColQwen3_5", "ColQwen3_5Processor", ("qwen3_5",), ("ColQwen3_5",), True),
        _Family("colpali", "ColPali", "ColPaliProcessor", ("paligemma",), ("ColPali",), False, square_grid=True),
        _Family("colidefics3", "ColIdefics3", "ColIdefics3Processor", ("idefics3",), ("ColIdefics3",), False),
        _Family(
            "colmodernvbert", "ColModernVBert", "ColModernVBertProcessor", ("modernvbert",), ("ColModernVBert",), False
        ),
        _Family("colgemma3", "ColGemma3", "ColGemmaProcessor3", ("gemma3",), ("ColGemma3",), False),
    )
}

#: Family names accepted by ``family=`` and returned by :func:`detect_family`.
SUPPORTED_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)

_FAMILY_ALIASES: dict[str, str] = {
    "colsmol": "colidefics3",
    "colgemma": "colgemma3",
    "colgemmaprocessor3": "colgemma3",
}

# colpali-engine single-vector ("Bi") models: not late-interaction, not supported here.
_SINGLE_VECTOR_ARCHS = frozenset(
    {"BiQwen2", "BiQwen2_5", "BiQwen3", "BiQwen3_5", "BiPali", "BiPaliProj", "BiIdefics3", "BiModernVBert", "BiGemma3"}
)
# transformers-native retrieval ports (the "-hf" checkpoints): different weights layout and classes.
_TRANSFORMERS_NATIVE_TYPES = frozenset({"colpali", "colqwen2", "colmodernvbert"})


def _normalise_family(family: str) -> str:
    """Map user spellings (``ColQwen2.5``, ``colqwen2-5``, ``colsmol``) to a family name."""
    key = family.strip().lower().replace(".", "_").replace("-", "_")
    key = _FAMILY_ALIASES.get(key, key)
    if key.endswith("_processor"):
        key = key[: -len("_processor")]
    if key not in _FAMILIES:
        raise ModelLoadError(
            f"Unknown model family {family!r}. Supported families: {', '.join(SUPPORTED_FAMILIES)}."
        )
    return key


def _family_from_config(config: Mapping[str, Any], origin: str) -> str:
    """Pick the family from a ``config.json`` dict: ``architectures`` first, then ``model_type``."""
    architectures = [str(a) for a in (config.get("architectures") or [])]
    for arch in architectures:
        for fam in _FAMILIES.values():
            if arch in fam.architectures:
                return fam.name
    for arch in architectures:
        if arch in _SINGLE_VECTOR_ARCHS:
            raise ModelLoadError(
                f"{origin} is a single-vector colpali-engine model ({arch}); docpc-retrievers needs a "
                f"multi-vector (late-interaction) model. Supported families: {', '.join(SUPPORTED_FAMILIES)}."
            )
    model_type = str(config.get("model_type") or "")
    if model_type in _TRANSFORMERS_NATIVE_TYPES or any(a.endswith("ForRetrieval") for a in architectures):
        raise ModelLoadError(
            f"{origin} is a transformers-native retrieval checkpoint (model_type {model_type!r}, "
            f"architectures {architectures}); docpc-retrievers loads colpali-engine checkpoints. Use the "
            f"checkpoint without the '-hf' suffix (e.g. {DEFAULT_MODEL!r} instead of '{DEFAULT_MODEL}-hf')."
        )
    for fam in _FAMILIES.values():
        if model_type in fam.model_types:
            return fam.name
    raise ModelLoadError(
        f"Cannot tell which ColPali-family model {origin} is (model_type {model_type or None!r}, "
        f"architectures {architectures}). Supported families: {', '.join(SUPPORTED_FAMILIES)}; "
        "pass family=... if the checkpoint is one of them."
    )

