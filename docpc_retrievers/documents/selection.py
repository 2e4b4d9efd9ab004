"""Choose the K representative pages of a document that go into its grid image.

:func:`select_pages` is a pure function of the page count (plus seed and page embeddings
for the ``random`` and ``cluster`` strategies); :func:`select_document_pages` applies it
to an opened PDF, rendering small thumbnails only when the ``cluster`` strategy needs them.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from docpc_retrievers.config import STRATEGIES  # the rules settings check, defined with them

if TYPE_CHECKING:
    from docpc_retrievers.documents.pdf import PDFDocument

__all__ = [
    "CLUSTER_THUMBNAIL_FIT",
    "DEFAULT_MAX_CLUSTER_PAGES",
    "PageEmbedder",
    "STRATEGIES",
    "select_document_pages",
    "select_pages",
    "thumbnail_embedding",
]

logger = logging.getLogger(__name__)


#: Maps page images to a float array of shape [len(images), d]: one embedding per page.
PageEmbedder = Callable[[Sequence[Image.Image]], np.ndarray]

#: Pixel box of the thumbnails rendered for the ``cluster`` strategy.
CLUSTER_THUMBNAIL_FIT: tuple[int, int] = (64, 64)
#: Longest run of pages that ``cluster`` embeds; longer documents are sampled uniformly.
DEFAULT_MAX_CLUSTER_PAGES: int = 256

_KMEANS_ITERATIONS = 20


def _validate(page_count: int, k: int, strategy: str, seed: int) -> tuple[int, int]:
    """Check the common arguments of the selection functions; return them as plain ints."""
    if isinstance(page_count, bool) or isinstance(k, bool):
        raise TypeError("page_count and k must be integers")
    page_count = operator.index(page_count)
    k = operator.index(k)
    if page_count < 1:
        raise ValueError(f"page_count must be >= 1 (a document without pages has nothing to select), got {page_count}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown page selection strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}")
    if isinstance(seed, bool) or operator.index(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return page_count, k


def _uniform(page_count: int, k: int) -> list[int]:
    """k evenly spaced indices from 0 to page_count-1 inclusive (requires k <= page_count).

    Rounds half up in exact integer arithmetic: with a spacing >= 1 the indices stay distinct.
    """
    if k == 1:
        return [0]
    span, steps = page_count - 1, k - 1
    return [(2 * i * span + steps) // (2 * steps) for i in range(k)]


def _squared_distances(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, shape [len(points), len(centres)], clipped at 0."""
    dist = (
        np.einsum("ij,ij->i", points, points)[:, None]
        - 2.0 * points @ centres.T
        + np.einsum("ij,ij->i", centres, centres)[None, :]
    )
    return np.maximum(dist, 0.0)


def _kmeans_pp_init(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding; returns fewer than k centres when the remaining points coincide."""
    first = int(rng.integers(points.shape[0]))
    centres = [points[first]]
    closest = _squared_distances(points, points[first : first + 1])[:, 0]
    while len(centres) < k:
        total = float(closest.sum())
        if total <= 1e-12:
            break  # every point equals some centre: no distinct centre left to pick
        choice = int(rng.choice(points.shape[0], p=closest / total))
        centres.append(points[choice])
        closest = np.minimum(closest, _squared_distances(points, points[choice : choice + 1])[:, 0])
    return np.stack(centres)


def _cluster_representatives(embeddings: np.ndarray, k: int, seed: int) -> list[int]:
    """Row indices of k distinct representatives: k-means, then each cluster's row nearest its centroid.

    Deterministic for a given seed. Collapsed or empty clusters are topped up with the rows
    farthest from those already chosen (lowest row first on ties).
    """
    n = embeddings.shape[0]
    k = min(k, n)
    points = embeddings.astype(np.float64, copy=False)
    rng = np.random.default_rng(seed)
    centres = _kmeans_pp_init(points, k, rng)
    assignment = np.full(n, -1)
    for _ in range(_KMEANS_ITERATIONS):
        new_assignment = np.argmin(_squared_distances(points, centres), axis=1)
        if np.array_equal(new_assignment, assignment):
            break
        assignment = new_assignment
        for c in range(centres.shape[0]):
            members = assignment == c
            if members.any():
                centres[c] = points[members].mean(axis=0)
    distances = _squared_distances(points, centres)
    chosen: list[int] = []
    for c in range(centres.shape[0]):
        members = np.flatnonzero(assignment == c)
        if members.size:
            chosen.append(int(members[np.argmin(distances[members, c])]))
    if len(chosen) < k:
        logger.debug("cluster selection: %d of %d clusters non-empty; filling up", len(chosen), k)
        nearest = _squared_distances(points, points[chosen]).min(axis=1) if chosen else np.zeros(n)
        taken = np.zeros(n, dtype=bool)
        taken[chosen] = True
        while len(chosen) < k:
            candidates = np.where(taken, -np.inf, nearest)
            pick = int(np.argmax(candidates))
            chosen.append(pick)
            taken[pick] = True
            nearest = np.minimum(nearest, _squared_distances(points, points[pick : pick + 1])[:, 0])
    return sorted(chosen)


def _check_embeddings(page_embeddings: object, rows: int) -> np.ndarray:
    """Validate a [rows, d] finite numeric array of page embeddings."""
    array = np.asarray(page_embeddings, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != rows or array.shape[1] < 1:
        raise ValueError(f"page_embeddings must have shape [{rows}, d] with d >= 1, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("page_embeddings contain NaN or infinite values")
    return array


def select_pages(
    page_count: int,
    k: int,
    strategy: str = "first",
    *,
    seed: int = 0,
    page_embeddings: np.ndarray | None = None,
) -> list[int]:
    """Pick min(k, page_count) distinct 0-based page indices, sorted, by the given strategy.

    ``cluster`` needs ``page_embeddings`` (shape [page_count, d]); ``random`` and
    ``cluster`` are reproducible for a given ``seed``.
    """
    page_count, k = _validate(page_count, k, strategy, seed)
    embeddings = None
    if strategy == "cluster":
        if page_embeddings is None:
            raise ValueError("the 'cluster' strategy needs page_embeddings of shape [page_count, d]")
        embeddings = _check_embeddings(page_embeddings, page_count)
    if page_count <= k:
        return list(range(page_count))
    if strategy == "first":
        return list(range(k))
    if strategy == "last":
        return list(range(page_count - k, page_count))
    if strategy == "boundary":
        head = math.ceil(k / 2)
        return list(range(head)) + list(range(page_count - (k - head), page_count))
    if strategy == "uniform":
        return _uniform(page_count, k)
    if strategy == "random":
        rng = np.random.default_rng(seed)
        return sorted(int(i) for i in rng.choice(page_count, size=k, replace=False))
    assert embeddings is not None
    return _cluster_representatives(embeddings, k, seed)


def thumbnail_embedding(images: Sequence[Image.Image], size: int = 16) -> np.ndarray:
    """Cheap model-free page embedding: greyscale size x size thumbnail, centred, L2-normalised.

    Enough to tell title pages, text pages, tables and figures apart for ``cluster``.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    rows = np.zeros((len(images), size * size), dtype=np.float32)
    for i, image in enumerate(images):
        small = image.convert("L").resize((size, size), Image.Resampling.BOX)
        vector = np.asarray(small, dtype=np.float64).reshape(-1) / 255.0
        vector -= vector.mean()
        norm = float(np.linalg.norm(vector))
        # A flat page leaves only rounding noise after centring: keep it an exact zero vector.
        # (One grey level of difference in one pixel already gives a norm of about 3e-3.)
        if norm > 1e-6:
            rows[i] = vector / norm
    return rows


def select_document_pages(
    doc: PDFDocument,
    k: int,
    strategy: str,
    *,
    seed: int = 0,
    page_embedder: PageEmbedder | None = None,
    max_cluster_pages: int = DEFAULT_MAX_CLUSTER_PAGES,
) -> list[int]:
    """Select the pages of an opened PDF; only ``cluster`` renders (small thumbnails).

    For ``cluster``, documents longer than ``max_cluster_pages`` (at least ``k``) are
    sampled uniformly before embedding with ``page_embedder`` (default
    :func:`thumbnail_embedding`).
    """
    page_count, k = _validate(doc.page_count, k, strategy, seed)
    if strategy != "cluster":
        return select_pages(page_count, k, strategy, seed=seed)
    if page_count <= k:
        return list(range(page_count))
    if isinstance(max_cluster_pages, bool) or operator.index(max_cluster_pages) < 1:
        raise ValueError(f"max_cluster_pages must be >= 1, got {max_cluster_pages!r}")
    budget = max(operator.index(max_cluster_pages), k)
    candidates = list(range(page_count)) if page_count <= budget else _uniform(page_count, budget)
    images = doc.render(candidates, fit=CLUSTER_THUMBNAIL_FIT)
    embedder = page_embedder if page_embedder is not None else thumbnail_embedding
    embeddings = _check_embeddings(embedder(images), len(candidates))
    rows = _cluster_representatives(embeddings, k, seed)
    selected = [candidates[r] for r in rows]
    logger.debug("%s: cluster selection over %d pages picked %s", doc.path, len(candidates), selected)
    return selected
