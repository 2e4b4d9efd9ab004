"""Thread budgets: BLAS held to one thread while any user is inside, torch to one while indexing on 2 cores."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy  # noqa: F401  (loads the BLAS this limits)
import pytest
import torch
from threadpoolctl import threadpool_info

from docpc_retrievers.blas_threads import indexing_threads, single_blas_thread


def _blas_threads() -> set[int]:
    """Threads of the BLAS libraries the limit is for: every one loaded."""
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_blas_limit_is_counted_across_nested_and_concurrent_users() -> None:
    """A pool thread leaving does not lift the limit the indexing thread still holds; the last one out restores it."""
    outside = _blas_threads()
    if not outside or outside == {1}:
        pytest.skip("numpy's BLAS runs one thread here already: nothing to limit")

    def pool_thread() -> None:
        with single_blas_thread():
            pass

    with single_blas_thread():
        with single_blas_thread():
            assert _blas_threads() == {1}
        assert _blas_threads() == {1}  # the nested exit did not restore
        worker = threading.Thread(target=pool_thread)
        worker.start()
        worker.join(10)
        assert _blas_threads() == {1}  # nor did the other thread's
    assert _blas_threads() == outside


@pytest.mark.parametrize(("cores", "one_thread"), [(2, True), (1, True), (8, False)])
def test_indexing_encodes_with_one_torch_thread_on_small_machines(
    monkeypatch: pytest.MonkeyPatch, cores: int, one_thread: bool
) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr("os.cpu_count", lambda: cores)
        with indexing_threads():
            assert torch.get_num_threads() == (1 if one_thread else 2)
            assert _blas_threads() == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_blas_library_loaded_after_the_first_limit_is_limited_too() -> None:
    """scipy's own OpenBLAS arrives with the encoder's imports, often after a first search set the limit."""
    import subprocess
    import sys

    pytest.importorskip("scipy")
    script = """
from threadpoolctl import threadpool_info
from docpc_retrievers.blas_threads import single_blas_thread

def blas():
    return {lib["filepath"]: lib["num_threads"] for lib in threadpool_info()
            if lib["user_api"] == "blas"}

with single_blas_thread():
    pass
import scipy.linalg  # noqa: F401  (loads scipy's own OpenBLAS)
outside = blas()
with single_blas_thread():
    inside = blas()
print(len(outside), max(outside.values()), sorted(set(inside.values())))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    n_libs, most, inside = int(out[0]), int(out[1]), out[2:]
    if n_libs < 2 or most == 1:
        pytest.skip("scipy shares numpy's BLAS here, or BLAS runs one thread already")
    assert inside == ["[1]"]


def test_a_store_builds_its_summaries_on_one_blas_thread(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each document's centroids are a few small products: more BLAS threads only spin beside the writer's other work."""
    from pathlib import Path

    import numpy as np

    from docpc_retrievers.store import records
    from docpc_retrievers.store.multivector import MultiVectorStore

    if _blas_threads() == {1}:
        pytest.skip("numpy's BLAS runs one thread here already: nothing to hold")
    seen: list[set[int]] = []
    original = records.document_centroids

    def recording(*args: object, **kwargs: object) -> object:
        seen.append(_blas_threads())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(records, "document_centroids", recording)
    rng = np.random.default_rng(0)
    docs = [rng.standard_normal((30, 16)).astype(np.float32) for _ in range(3)]
    with MultiVectorStore(Path(str(tmp_path)) / "s", writable=True) as store:
        store.add(["a", "b", "c"], [d / np.linalg.norm(d, axis=1, keepdims=True) for d in docs], [{}, {}, {}])
    assert seen == [{1}, {1}, {1}]
    assert _blas_threads() != {1}  # and the limit is lifted after


def test_a_search_thread_limit_holds_torch_blas_and_the_approximate_pass_to_it() -> None:
    """What ``docpc serve-shard --threads`` sets: several searchers on one machine's cores must not each spin on all
    of them (run in a child: the limit is process-wide)."""
    code = (
        "import sys\n"
        "from threadpoolctl import threadpool_info\n"
        "from docpc_retrievers.store import shortlist_threads as st\n"
        "st.limit_search_threads(1)\n"
        "assert 'torch' not in sys.modules and st.search_thread_limit() == 1\n"
        "import torch\n"  # as a first search imports it
        "assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
        "assert st.shortlist_pool() is None\n"
        "assert all(p['num_threads'] == 1 for p in threadpool_info()), threadpool_info()\n"
        "try:\n"
        "    st.limit_search_threads(0)\n"
        "except ValueError as exc:\n"
        "    assert 'threads must be >= 1' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('0 threads accepted')\n"
        "torch.set_num_threads(2)\n"
        "st.limit_search_threads(1)\n"  # torch already loaded: set on it
        "assert torch.get_num_threads() == 1\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
