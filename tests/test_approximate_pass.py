"""The approximate pass that shortlists candidates: blocks on several threads score what one thread does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.scoring.maxsim import maxsim
from docpc_retrievers.store.codec import dequantize, quantize
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search import SearchConfig, exact

DIM = 16


pytestmark = pytest.mark.usefixtures("fresh_chroma")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


class _Rows:
    """An in-memory VectorSource: int8 rows per document; ``gone`` are deleted (left out of :meth:`rows`)."""

    def __init__(self, docs: dict[str, np.ndarray], gone: set[str]) -> None:
        self.docs = {d: quantize(v) for d, v in docs.items()}
        self.gone = gone

    def rows(self, ids: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        kept = [d for d in ids if d not in self.gone]
        rows = np.concatenate([self.docs[d][0] for d in kept]) if kept else np.zeros((0, DIM), np.int8)
        scales = np.concatenate([self.docs[d][1] for d in kept]) if kept else np.zeros(0, np.float16)
        return kept, [len(self.docs[d][0]) for d in kept], rows, scales

    def parts(self, doc_id: str) -> tuple[int, ...] | None:
        return None


def test_blocks_on_threads_score_like_one_pass_and_leave_deleted_documents_out() -> None:
    rng = np.random.default_rng(0)
    docs = {f"d{i}": _unit(rng.standard_normal((int(rng.integers(3, 30)), DIM))) for i in range(41)}
    source = _Rows(docs, gone={"d5", "d33"})
    ids = list(docs)
    query = _unit(rng.standard_normal((7, DIM)))
    kept, whole, _ = exact.exact_scores(query, ids, source, fast=True)
    blocked_ids, blocked = exact.approximate_scores(query, ids, source, block=4, threads=3)
    live = [d for d in ids if d not in {"d5", "d33"}]
    assert kept == blocked_ids == live and blocked.shape == (39,)
    np.testing.assert_array_equal(blocked, whole)
    assert np.isfinite(blocked).all()
    # The approximate scores are close to exact MaxSim over the dequantised rows.
    reference = maxsim([query], [dequantize(*source.docs[d]) for d in live])[0]
    np.testing.assert_allclose(blocked, reference, atol=0.05)
    assert exact.approximate_scores(query, [], source)[1].shape == (0,)


def test_a_search_whose_approximate_pass_spans_blocks_on_threads_returns_the_single_thread_ranking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1)
    docs = [_unit(rng.standard_normal((int(rng.integers(10, 40)), DIM))) for _ in range(300)]
    ids = [f"{i:032x}" for i in range(300)]
    config = SearchConfig(n_centroids=4)  # 300 documents, under scan_below: every one through the approximate pass
    with MultiVectorStore(tmp_path / "s", writable=True, search=config) as store:
        store.add(ids, docs, [{"source": f"/d/{i}.pdf"} for i in range(300)])
    query = _unit(rng.standard_normal((9, DIM)))
    with MultiVectorStore(tmp_path / "s", search=config.with_options(threads=1)) as store:
        one = store.search(query, top_k=10)
    with MultiVectorStore(tmp_path / "s", search=config.with_options(block=16, threads=2)) as store:
        store.refresh()  # opens the view
        calls: list[int] = []
        original = store.reader.view.reader.rows

        def counted(block: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
            calls.append(len(block))
            return original(block)

        monkeypatch.setattr(store.reader.view.reader, "rows", counted)
        many = store.search(query, top_k=10)
    assert [(h.id, h.score) for h in many] == [(h.id, h.score) for h in one]
    assert len(calls) > 2 and max(calls[:-1]) <= 16  # the approximate pass ran in blocks, then the exact pass
    exact_top = np.argsort(-maxsim([query], docs)[0])[:10]
    assert [h.id for h in one][:3] == [ids[i] for i in exact_top[:3]]


def test_reads_are_hinted_until_a_copy_runs_at_memory_speed_and_again_after_a_slow_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docpc_retrievers.store import payload

    rng = np.random.default_rng(2)
    docs = [_unit(rng.standard_normal((200, 128))) for _ in range(60)]  # 1.5 MB of int8 rows: a sample that tells
    ids = [f"{i:032x}" for i in range(60)]
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids, docs, [{"source": f"/d/{i}.pdf"} for i in range(60)])
    with MultiVectorStore(tmp_path / "s") as store:
        store.count()
        reader = store.reader.view.reader
        hinted: list[int] = []
        original = reader.cache.advise
        monkeypatch.setattr(reader.cache, "advise", lambda block: (hinted.append(len(block)), original(block))[1])
        monkeypatch.setattr(payload, "WARM_COPY_RATE", 1.0)  # every copy counts as one from memory
        first = reader.rows(ids)
        kept, sizes, rows, scales = first[0], first[1], first[2].copy(), first[3].copy()
        assert hinted == [60]  # a new reader hints its first reads
        again = reader.rows(ids)
        assert hinted == [60]  # the last copy ran at memory speed: no hint
        assert again[0] == kept and again[1] == sizes
        np.testing.assert_array_equal(again[2], rows)
        np.testing.assert_array_equal(again[3], scales)
        monkeypatch.setattr(payload, "WARM_COPY_RATE", 1e30)  # every copy counts as one from disk
        reader.rows(ids)
        assert hinted == [60]  # decided by the copy before it
        reader.rows(ids)
        assert hinted == [60, 60]  # a slow copy brings the hints back
    expected = np.concatenate([quantize(d)[0] for d in docs])
    np.testing.assert_array_equal(rows, expected)


def test_a_process_whose_first_products_run_in_the_pass_threads_keeps_its_torch_threads() -> None:
    """The pass's threads must not change the torch thread count of a thread that has not multiplied yet."""
    import subprocess
    import sys

    script = """
import numpy as np
from docpc_retrievers.store.codec import quantize
from docpc_retrievers.store.search import exact

class Rows:
    def __init__(self, docs):
        self.docs = {d: quantize(v) for d, v in docs.items()}
    def rows(self, ids):
        return (list(ids), [len(self.docs[d][0]) for d in ids], np.concatenate([self.docs[d][0] for d in ids]),
                np.concatenate([self.docs[d][1] for d in ids]))
    def parts(self, doc_id):
        return None

rng = np.random.default_rng(0)
docs = {f"d{i}": rng.standard_normal((6, 16)).astype(np.float32) for i in range(24)}
exact.approximate_scores(rng.standard_normal((3, 16)).astype(np.float32), list(docs), Rows(docs), block=4, threads=2)
import torch
print(torch.get_num_threads())
"""
    baseline = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                              capture_output=True, text=True, check=True)
    before = int(baseline.stdout.split()[-1])
    if before == 1:
        pytest.skip("torch runs one thread here by default: a lost thread could not show")
    after = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(after.stdout.split()[-1]) == before


def test_the_pass_threads_multiply_on_one_openmp_thread_each_and_no_other_thread_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    import torch

    before = torch.get_num_threads()
    from docpc_retrievers.store import shortlist_threads

    monkeypatch.setattr(shortlist_threads, "_POOL", None)  # a pool of this test's own
    pool = shortlist_threads._started_pool()
    if pool is None:
        pytest.skip("OpenMP's thread setter is not reachable here: the pass runs on the calling thread")
    try:
        assert set(pool.map(lambda _: torch.get_num_threads(), range(8))) == {1}
        fresh: list[int] = []
        thread = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert torch.get_num_threads() == before and fresh == [before]
    finally:
        pool.shutdown()


def test_the_gather_copies_mapped_pieces_in_order_silently_and_refuses_a_wrong_size(tmp_path: Path) -> None:
    import warnings

    from docpc_retrievers.store.payload import _gather

    rng = np.random.default_rng(3)
    mapped = tmp_path / "rows.bin"
    rng.integers(0, 256, 10_000, dtype=np.uint8).tofile(mapped)
    before = mapped.read_bytes()
    for mode in ("c", "r"):  # copy-on-write as the cache maps its files (torch's copy), read-only (numpy's)
        view = np.memmap(mapped, dtype=np.uint8, mode=mode).view(np.ndarray)
        pieces = [view[700:1500], view[0:300], view[9000:10_000]]
        out = np.zeros(2100, dtype=np.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch warns when it wraps a read-only array
            _gather(pieces, out)
        np.testing.assert_array_equal(out, np.concatenate(pieces))
        with pytest.raises(ValueError, match="exactly"):
            _gather(pieces, np.zeros(2101, dtype=np.uint8))
    assert mapped.read_bytes() == before
