"""The encoder contract every other part relies on: multi-vector arrays per image and per query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image


# --------------------------------------------------------------------------- protocol


@runtime_checkable
class Encoder(Protocol):
    """What the rest of docpc-retrievers needs from a multi-vector encoder.

    Every returned array is float32 ``[n_vectors_i, dim]``, one per input in input order,
    with padding rows removed. ``settings()`` is a JSON-safe dict of everything that
    changes the embedding; stores record it and refuse to mix encoders.
    """

    model_id: str
    dim: int

    def encode_images(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[np.ndarray]:
        """Encode page/grid images into one multi-vector array each."""
        ...

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[np.ndarray]:
        """Encode text queries into one multi-vector array each."""
        ...

    def encode_images_with_info(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[EncodedImage]:
        """:meth:`encode_images` plus, per image, which rows are visual tokens and their ``(rows, cols)`` grid."""
        ...

    def settings(self) -> dict[str, Any]:
        """JSON-safe description of everything that changes the embedding."""
        ...


@dataclass(frozen=True, eq=False)
class EncodedImage:
    """One encoded image with token bookkeeping, for mapping vectors back to image regions.

    ``embeddings``: float32 ``[n, dim]`` (padding removed; the same rows ``encode_images`` returns).
    ``visual_mask``: bool ``[n]``, True where the row is an image (visual) token.
    ``patch_grid``: ``(rows, cols)`` of merged visual tokens for dynamic-resolution (Qwen) families,
    else None. The visual rows, in order, are that grid in row-major order:
    ``embeddings[visual_mask].reshape(rows, cols, dim)``.
    """

    embeddings: np.ndarray
    visual_mask: np.ndarray
    patch_grid: tuple[int, int] | None


