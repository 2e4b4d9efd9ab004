"""Tests of docpc_retrievers.documents.selection: every strategy's contract, k-means clustering, thumbnails."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from PIL import Image

from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.documents.selection import (
    CLUSTER_THUMBNAIL_FIT,
    STRATEGIES,
    select_document_pages,
    select_pages,
    thumbnail_embedding,
)

PAGE_COUNTS = range(1, 31)
KS = (1, 4, 16)


def random_embeddings(page_count: int, dim: int = 8, seed: int = 123) -> np.ndarray:
    return np.random.default_rng(seed + page_count).normal(size=(page_count, dim))


def run(strategy: str, page_count: int, k: int, seed: int = 0) -> list[int]:
    embeddings = random_embeddings(page_count) if strategy == "cluster" else None
    return select_pages(page_count, k, strategy, seed=seed, page_embeddings=embeddings)


def test_strategies_constant() -> None:
    assert STRATEGIES == ("first", "boundary", "uniform", "random", "last", "cluster")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("k", KS)
def test_common_contract(strategy: str, k: int) -> None:
    for n in PAGE_COUNTS:
        pages = run(strategy, n, k)
        assert len(pages) == min(k, n), (n, pages)
        assert pages == sorted(set(pages)), (n, pages)
        assert all(isinstance(p, int) and 0 <= p < n for p in pages), (n, pages)
        if n <= k:
            assert pages == list(range(n))


@pytest.mark.parametrize("k", KS)
def test_first(k: int) -> None:
    for n in PAGE_COUNTS:
        assert select_pages(n, k, "first") == list(range(min(k, n)))


@pytest.mark.parametrize("k", KS)
def test_last(k: int) -> None:
    for n in PAGE_COUNTS:
        m = min(k, n)
        assert select_pages(n, k, "last") == list(range(n - m, n))


@pytest.mark.parametrize("k", KS)
def test_boundary(k: int) -> None:
    for n in PAGE_COUNTS:
        pages = select_pages(n, k, "boundary")
        if n <= k:
            continue
        head, tail = math.ceil(k / 2), k // 2
        assert pages[:head] == list(range(head))
        assert pages[head:] == list(range(n - tail, n))


@pytest.mark.parametrize(
    ("n", "k", "expected"),
    [
        (10, 1, [0]),
        (10, 3, [0, 1, 9]),
        (10, 4, [0, 1, 8, 9]),
        (5, 4, [0, 1, 3, 4]),
        (30, 16, [*range(8), *range(22, 30)]),
    ],
)
def test_boundary_examples(n: int, k: int, expected: list[int]) -> None:
    assert select_pages(n, k, "boundary") == expected


@pytest.mark.parametrize("k", KS)
def test_uniform(k: int) -> None:
    for n in PAGE_COUNTS:
        pages = select_pages(n, k, "uniform")
        if n <= k:
            continue
        assert pages[0] == 0
        if k == 1:
            assert pages == [0]
            continue
        assert pages[-1] == n - 1
        gaps = np.diff(pages)
        assert gaps.min() >= 1
        assert gaps.max() - gaps.min() <= 1, (n, pages)
        ideal = np.linspace(0, n - 1, k)
        assert np.max(np.abs(np.array(pages) - ideal)) <= 0.5 + 1e-9


@pytest.mark.parametrize(
    ("n", "k", "expected"),
    [(10, 4, [0, 3, 6, 9]), (5, 4, [0, 1, 3, 4]), (117, 4, [0, 39, 77, 116]), (7, 1, [0]), (3, 2, [0, 2])],
)
def test_uniform_examples(n: int, k: int, expected: list[int]) -> None:
    assert select_pages(n, k, "uniform") == expected


@pytest.mark.parametrize("k", KS)
def test_random_reproducible_and_seed_dependent(k: int) -> None:
    for n in PAGE_COUNTS:
        runs = {seed: select_pages(n, k, "random", seed=seed) for seed in range(8)}
        for seed, pages in runs.items():
            assert select_pages(n, k, "random", seed=seed) == pages
        if n > k:
            assert len({tuple(p) for p in runs.values()}) > 1, n


def test_random_eventually_covers_every_page() -> None:
    seen: set[int] = set()
    for seed in range(200):
        seen.update(select_pages(30, 4, "random", seed=seed))
    assert seen == set(range(30))


def test_random_ignores_embeddings_and_is_pure() -> None:
    a = select_pages(25, 4, "random", seed=5)
    b = select_pages(25, 4, "random", seed=5, page_embeddings=random_embeddings(25))
    select_pages(25, 4, "random", seed=6)  # an unrelated call must not change later results
    assert select_pages(25, 4, "random", seed=5) == a == b


def separated_clusters(
    page_count: int, n_clusters: int, seed: int, dim: int = 6
) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings in n_clusters tight, far-apart blobs; pages shuffled across clusters."""
    rng = np.random.default_rng(seed)
    labels = np.arange(page_count) % n_clusters
    rng.shuffle(labels)
    centres = rng.normal(size=(n_clusters, dim)) * 100.0
    embeddings = centres[labels] + rng.normal(scale=0.1, size=(page_count, dim))
    return embeddings, labels


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("page_count", "k"), [(20, 4), (30, 16), (9, 3)])
def test_cluster_picks_one_page_per_separated_cluster(seed: int, page_count: int, k: int) -> None:
    embeddings, labels = separated_clusters(page_count, k, seed)
    pages = select_pages(page_count, k, "cluster", seed=seed, page_embeddings=embeddings)
    assert len(pages) == k and pages == sorted(pages)
    assert sorted(labels[pages].tolist()) == list(range(k))


def test_cluster_representative_is_closest_to_centroid() -> None:
    embeddings, labels = separated_clusters(24, 4, seed=3)
    pages = select_pages(24, 4, "cluster", seed=0, page_embeddings=embeddings)
    for page in pages:
        members = np.flatnonzero(labels == labels[page])
        centroid = embeddings[members].mean(axis=0)
        distances = np.linalg.norm(embeddings[members] - centroid, axis=1)
        assert members[np.argmin(distances)] == page


def test_cluster_is_deterministic() -> None:
    embeddings = random_embeddings(30)
    first = select_pages(30, 4, "cluster", seed=11, page_embeddings=embeddings)
    assert all(select_pages(30, 4, "cluster", seed=11, page_embeddings=embeddings) == first for _ in range(3))


@pytest.mark.parametrize("k", [4, 16])
def test_cluster_identical_pages_still_give_k_distinct(k: int) -> None:
    embeddings = np.ones((20, 5))
    pages = select_pages(20, k, "cluster", page_embeddings=embeddings)
    assert len(pages) == k and len(set(pages)) == k and pages == sorted(pages)


def test_cluster_two_groups_collapse_fill_keeps_both_groups() -> None:
    embeddings = np.array([[0.0, 0.0]] * 6 + [[10.0, 0.0]] * 6)
    pages = select_pages(12, 4, "cluster", page_embeddings=embeddings)
    assert len(set(pages)) == 4
    assert any(p < 6 for p in pages) and any(p >= 6 for p in pages)


def test_cluster_requires_valid_embeddings() -> None:
    with pytest.raises(ValueError, match="page_embeddings"):
        select_pages(10, 4, "cluster")
    with pytest.raises(ValueError, match=r"shape \[10, d\]"):
        select_pages(10, 4, "cluster", page_embeddings=np.zeros((9, 3)))
    bad = np.zeros((10, 3))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        select_pages(10, 4, "cluster", page_embeddings=bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 4, "first"), "page_count"),
        ((-2, 4, "first"), "page_count"),
        ((10, 0, "first"), "k must be"),
        ((10, -1, "uniform"), "k must be"),
    ],
)
def test_invalid_arguments(args: tuple[int, int, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        select_pages(*args)


def test_unknown_strategy_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        select_pages(10, 4, "middle")
    assert "middle" in str(info.value)
    for name in STRATEGIES:
        assert name in str(info.value)


def test_negative_seed_rejected() -> None:
    with pytest.raises(ValueError, match="seed"):
        select_pages(10, 4, "random", seed=-1)


# -- thumbnail embedding -------------------------------------------------------------


def test_thumbnail_embedding_shape_centred_and_normalised() -> None:
    left_dark = Image.new("RGB", (40, 60), "white")
    left_dark.paste((0, 0, 0), (0, 0, 20, 60))
    top_dark = Image.new("RGB", (40, 60), "white")
    top_dark.paste((0, 0, 0), (0, 0, 40, 30))
    rows = thumbnail_embedding([left_dark, top_dark, left_dark.copy()], size=8)
    assert rows.shape == (3, 64)
    assert rows.dtype == np.float32
    assert np.allclose(rows.mean(axis=1), 0.0, atol=1e-6)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert np.allclose(rows[0], rows[2])
    assert abs(float(rows[0] @ rows[1])) < 0.5


def test_thumbnail_embedding_blank_page_and_empty_input() -> None:
    rows = thumbnail_embedding([Image.new("L", (30, 30), 200)])
    assert rows.shape == (1, 256)
    assert np.all(np.isfinite(rows)) and np.all(rows == 0.0)
    assert thumbnail_embedding([]).shape == (0, 256)


# -- selection on documents ----------------------------------------------------------


class FakeDocument:
    """Stands in for PDFDocument: records every render call."""

    def __init__(self, page_count: int) -> None:
        self.path = Path("fake.pdf")
        self.page_count = page_count
        self.render_calls: list[tuple[list[int], tuple[int, int] | None]] = []

    def render(self, indices: Sequence[int], *, fit: tuple[int, int] | None = None, **_: object) -> list[Image.Image]:
        self.render_calls.append((list(indices), fit))
        # three visual kinds of page, by page number
        shades = {0: 0, 1: 128, 2: 255}
        return [Image.new("RGB", (46, 64), (shades[i % 3],) * 3) for i in indices]


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "cluster"])
def test_document_selection_without_cluster_never_renders(strategy: str) -> None:
    doc = FakeDocument(40)
    pages = select_document_pages(doc, 4, strategy, seed=3)  # type: ignore[arg-type]
    assert pages == select_pages(40, 4, strategy, seed=3)
    assert doc.render_calls == []


def test_document_cluster_renders_small_thumbnails_and_uses_embedder() -> None:
    doc = FakeDocument(12)
    seen_sizes: list[tuple[int, int]] = []

    def embedder(images: Sequence[Image.Image]) -> np.ndarray:
        seen_sizes.extend(im.size for im in images)
        return thumbnail_embedding(images)

    pages = select_document_pages(doc, 3, "cluster", page_embedder=embedder)  # type: ignore[arg-type]
    assert doc.render_calls == [(list(range(12)), CLUSTER_THUMBNAIL_FIT)]
    assert len(seen_sizes) == 12
    assert sorted(p % 3 for p in pages) == [0, 1, 2]  # one page of each visual kind


def test_document_cluster_samples_long_documents() -> None:
    doc = FakeDocument(1000)
    pages = select_document_pages(doc, 4, "cluster", max_cluster_pages=50)  # type: ignore[arg-type]
    (rendered, _), = doc.render_calls
    assert len(rendered) == 50 and rendered[0] == 0 and rendered[-1] == 999
    assert rendered == select_pages(1000, 50, "uniform")
    assert set(pages) <= set(rendered) and len(pages) == 4


def test_document_cluster_short_document_renders_nothing() -> None:
    doc = FakeDocument(3)
    assert select_document_pages(doc, 4, "cluster") == [0, 1, 2]  # type: ignore[arg-type]
    assert doc.render_calls == []


def test_document_cluster_rejects_bad_embedder_output() -> None:
    doc = FakeDocument(10)
    def wrong_rows(images: Sequence[Image.Image]) -> np.ndarray:
        return np.zeros((3, 2))

    with pytest.raises(ValueError, match="shape"):
        select_document_pages(doc, 4, "cluster", page_embedder=wrong_rows)  # type: ignore[arg-type]


def test_document_cluster_on_real_pdf(tmp_path: Path) -> None:
    """12-page PDF with three visual kinds of page; cluster k=3 picks one page of each kind."""
    path = tmp_path / "kinds.pdf"
    doc = pymupdf.open()
    for i in range(12):
        page = doc.new_page(width=300, height=400)
        if i % 3 == 1:
            page.draw_rect(pymupdf.Rect(0, 0, 300, 400), color=None, fill=(0, 0, 0))
        elif i % 3 == 2:
            page.draw_rect(pymupdf.Rect(0, 0, 150, 400), color=None, fill=(0, 0, 0))
    doc.save(path)
    doc.close()
    with open_pdf(path) as pdf:
        pages = select_document_pages(pdf, 3, "cluster", seed=1)
    assert sorted(p % 3 for p in pages) == [0, 1, 2]
