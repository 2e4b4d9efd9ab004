"""MaxSim: batched and padded forms against the unpadded per-document reference."""

from __future__ import annotations

import numpy as np
import pytest

from docpc_retrievers.scoring.maxsim import maxsim, maxsim_reference


def _unit(rng: np.random.Generator, n: int, dim: int = 16) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_reference_on_hand_built_vectors() -> None:
    q = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    d = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, -1.0]], dtype=np.float32)
    # token 1: max(0.6, 1.0, 0.0) = 1.0 ; token 2: max(0.8, 0.0, -1.0) = 0.8
    assert maxsim_reference(q, d) == pytest.approx(1.8)


@pytest.mark.parametrize("seed", range(5))
def test_batched_matches_reference_for_ragged_documents(seed: int) -> None:
    rng = np.random.default_rng(seed)
    queries = [_unit(rng, int(rng.integers(1, 9))) for _ in range(4)]
    docs = [_unit(rng, int(rng.integers(1, 40))) for _ in range(23)]
    expected = np.array([[maxsim_reference(q, d) for d in docs] for q in queries])
    got = maxsim(queries, docs)
    assert got.shape == (4, 23)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_chunking_does_not_change_scores() -> None:
    rng = np.random.default_rng(7)
    q = [_unit(rng, 5)]
    docs = [_unit(rng, int(rng.integers(1, 30))) for _ in range(50)]
    np.testing.assert_allclose(maxsim(q, docs, max_vectors_per_chunk=7), maxsim(q, docs), rtol=1e-6)


def test_documents_of_different_lengths_score_right_when_all_similarities_are_negative() -> None:
    # Every real similarity is negative: padding with zeros would score 0 here.
    q = np.array([[1.0, 0.0]], dtype=np.float32)
    short = np.array([[-1.0, 0.0]], dtype=np.float32)
    long = np.array([[-0.6, 0.8], [-0.8, 0.6]], dtype=np.float32)
    np.testing.assert_allclose(maxsim([q], [short, long])[0], [-1.0, -0.6], rtol=1e-6)


def test_empty_inputs_and_bad_shapes() -> None:
    rng = np.random.default_rng(0)
    assert maxsim([], [_unit(rng, 2)]).shape == (0, 1)
    assert maxsim([_unit(rng, 2)], []).shape == (1, 0)
    with pytest.raises(ValueError):
        maxsim([_unit(rng, 2)], [np.zeros((0, 16), dtype=np.float32)])
    with pytest.raises(ValueError):
        maxsim([_unit(rng, 2, dim=8)], [_unit(rng, 3, dim=16)])


def _int8_docs(rng: np.random.Generator, lengths: list[int], dim: int = 64) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The int8 rows and scales the store keeps of unit documents, and those rows dequantised per document."""
    from docpc_retrievers.store.codec import dequantize, quantize

    rows, scales = quantize(np.concatenate([_unit(rng, n, dim) for n in lengths]))
    starts = np.cumsum([0, *lengths[:-1]])
    return [dequantize(rows[s : s + n], scales[s : s + n]) for s, n in zip(starts, lengths)], rows, scales


@pytest.mark.parametrize("equal_lengths", [True, False])
def test_int8_scoring_equals_the_reference_on_the_dequantised_rows(equal_lengths: bool) -> None:
    from docpc_retrievers.scoring.maxsim import maxsim_int8

    rng = np.random.default_rng(3)
    lengths = [24] * 30 if equal_lengths else [int(n) for n in rng.integers(1, 40, 30)]
    deq, rows, scales = _int8_docs(rng, lengths)
    q = _unit(rng, 7, 64)
    expected = np.array([maxsim_reference(q, d) for d in deq])
    np.testing.assert_allclose(maxsim_int8(q, rows, scales, lengths), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_tokens", [1, 7, 8, 25])
def test_int8_query_products_shortlist_like_the_exact_scores(n_tokens: int) -> None:
    """The int8 shortlisting pass: close to the exact int8 scores, same best document, any query length."""
    import torch

    from docpc_retrievers.scoring.kernels import int8_products_exact
    from docpc_retrievers.scoring.maxsim import maxsim_int8, quantized_query

    rng = np.random.default_rng(5)
    lengths = [int(n) for n in rng.integers(1, 40, 60)]
    deq, rows, scales = _int8_docs(rng, lengths)
    q = _unit(rng, n_tokens, 64)
    exact = maxsim_int8(q, rows, scales, lengths)
    rough = maxsim_int8(q, rows, scales, lengths, approximate=True)
    assert rough.shape == exact.shape == (60,)
    np.testing.assert_allclose(rough, exact, atol=2e-2 * n_tokens)
    assert np.argmax(rough) == np.argmax(exact)
    q8, token_scales = quantized_query(q)
    products = (int8_products_exact(torch.from_numpy(rows), q8).float() * token_scales).numpy()
    products *= scales.astype(np.float32)[:, None]
    np.testing.assert_allclose(products, np.concatenate(deq) @ q.T, atol=1.5e-2)


@pytest.mark.parametrize("n_tokens", [1, 5, 8, 25, 33, 300])
def test_both_int8_kernels_give_the_exact_integer_products(n_tokens: int) -> None:
    """oneDNN's quantized layer (for queries within the range it is exact for here) and torch._int_mm agree with
    int64 products exactly, any query length; int8_products_exact is exact for full-range queries too."""
    import torch

    from docpc_retrievers.scoring import kernels

    gen = torch.Generator().manual_seed(n_tokens)
    rows = torch.randint(-127, 128, (1000, 128), dtype=torch.int8, generator=gen)
    q8 = torch.randint(-127, 128, (n_tokens, 128), dtype=torch.int8, generator=gen).numpy()
    expected = rows.to(torch.int64) @ torch.from_numpy(q8).to(torch.int64).T
    assert torch.equal(kernels._int_mm(rows, q8).to(torch.int64), expected)
    assert torch.equal(kernels.int8_products_exact(rows, q8).to(torch.int64), expected)
    peak = kernels.onednn_exact_peak()
    if not peak:
        pytest.skip("this torch build has no oneDNN int8 layer")
    narrow = np.clip(q8, -peak, peak)
    onednn = kernels._onednn(rows, narrow)
    assert onednn.shape == (1000, n_tokens)
    assert torch.equal(onednn.to(torch.int64), rows.to(torch.int64) @ torch.from_numpy(narrow).to(torch.int64).T)


def test_quantized_queries_stay_where_the_kernel_is_exact_even_against_extreme_rows() -> None:
    """A query rounded for the int8 kernel in use stays within query_peak(), and its products with rows of +-127
    (where 16-bit pair sums would saturate on CPUs without VNNI) are the exact integer products."""
    import torch

    from docpc_retrievers.scoring import kernels
    from docpc_retrievers.scoring.maxsim import quantized_query

    assert kernels.query_peak() in (64, 127)
    query = np.random.default_rng(3).standard_normal((9, 128)).astype(np.float32)
    query[0] = np.where(np.arange(128) % 2 == 0, 1.0, -1.0)  # every code at the peak
    q8, scales = quantized_query(query)
    assert int(np.abs(q8.astype(np.int16)).max()) == kernels.query_peak()
    assert np.allclose(q8 * scales.numpy()[:, None], query, atol=float(scales.max()) / 2 + 1e-7)
    rows = torch.full((6, 128), 127, dtype=torch.int8)
    rows[1] = -127
    rows[2, ::2] = -127
    rows[3, 1::2] = -127
    rows[4:] = torch.randint(-127, 128, (2, 128), dtype=torch.int8, generator=torch.Generator().manual_seed(4))
    expected = rows.to(torch.int64) @ torch.from_numpy(q8).to(torch.int64).T
    assert torch.equal(kernels.int8_products_exact(rows, q8).to(torch.int64), expected)


def test_a_packed_query_is_not_reused_for_another_query() -> None:
    """The one-entry cache of packed queries: a new query (same shape, other values) is packed again."""
    import torch

    from docpc_retrievers.scoring import kernels

    rows = torch.randint(-127, 128, (64, 128), dtype=torch.int8, generator=torch.Generator().manual_seed(1))
    a = np.ones((3, 128), dtype=np.int8)
    b = -a
    try:
        first, second = kernels._onednn(rows, a), kernels._onednn(rows, b)
    except (RuntimeError, AttributeError):
        pytest.skip("this torch build has no oneDNN int8 layer")
    assert torch.equal(first, -second)
    assert not torch.equal(first, second)


def test_the_int8_kernel_in_use_is_the_one_chosen_for_this_machine_and_queries_round_the_same_for_all() -> None:
    from docpc_retrievers.scoring import kernels

    choice = kernels.int8_kernel_choice()
    assert choice.choice in kernels.available_kernels()
    assert kernels.int8_kernel() is kernels.KERNELS[choice.choice]
    assert kernels.query_peak() == (kernels.onednn_exact_peak() or 127)


@pytest.mark.parametrize("chunk_rows", [1, 50, 10_000])
def test_int8_shortlisting_in_chunks_scores_every_document_once(chunk_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of whole documents (smaller than one document, splitting the list anywhere) change no score."""
    import importlib


    module = importlib.import_module("docpc_retrievers.scoring.maxsim")  # the package re-exports a function of that name
    rng = np.random.default_rng(9)
    lengths = [int(n) for n in rng.integers(1, 90, 40)]
    _deq, rows, scales = _int8_docs(rng, lengths)
    q = _unit(rng, 6, 64)
    whole = module.maxsim_int8(q, rows, scales, lengths, approximate=True)
    monkeypatch.setattr(module, "INT8_CHUNK_ROWS", chunk_rows)
    chunked = module.maxsim_int8(q, rows, scales, lengths, approximate=True)
    assert chunked.shape == (40,)
    np.testing.assert_allclose(chunked, whole, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("equal_lengths", [True, False])
@pytest.mark.parametrize("n_tokens", [3, 9, 25, 48])
def test_the_int8_passs_padding_width_changes_no_score(
    equal_lengths: bool, n_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries padded to 8 or 32 columns (varied row counts take 8, equal ones 32) score every document alike."""
    import importlib


    module = importlib.import_module("docpc_retrievers.scoring.maxsim")
    rng = np.random.default_rng(11)
    lengths = [30] * 25 if equal_lengths else [int(n) for n in rng.integers(1, 60, 25)]
    _deq, rows, scales = _int8_docs(rng, lengths)
    q = _unit(rng, n_tokens, 64)
    now = module.maxsim_int8(q, rows, scales, lengths, approximate=True)
    for columns in (8, 32):
        monkeypatch.setattr(module, "INT8_COLUMNS", columns)
        monkeypatch.setattr(module, "INT8_VARIED_COLUMNS", columns)
        np.testing.assert_allclose(module.maxsim_int8(q, rows, scales, lengths, approximate=True), now,
                                   rtol=1e-6, atol=1e-6)
