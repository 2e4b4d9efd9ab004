"""An embedded store served from a child ``chroma run`` (``chroma_process=True``): the same records bit for bit,
the store readable embedded afterwards, the child gone with its store and with a killed process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import chromadb
import numpy as np
import pytest
from e2e_helpers import make_pdf, run_docpc, subprocess_env

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import StoreError, StoreLockedError
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.store.chroma_process import ChromaProcess
from docpc_retrievers.store.multivector import MultiVectorStore

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow]


def _answers(port: int) -> bool:
    try:
        chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
        return True
    except Exception:
        return False


def _records(store: MultiVectorStore, grids: bool = False) -> dict[str, tuple[bytes, dict[str, object], str, bytes | None]]:
    """Every document as stored: its vectors' bytes, public metadata (less the time it was indexed), text and
    (``grids``) grid preview."""
    ids = sorted(store.ids())
    texts = store.texts(ids)
    out = {}
    for doc in store.get(ids):
        grid = store.grid(doc.id) if grids else None
        metadata = {k: v for k, v in doc.metadata.items() if k != "indexed_at"}
        out[doc.id] = (store.vectors(doc.id).tobytes(), metadata, texts.get(doc.id, ""), grid)
    return out


def test_a_store_written_through_its_child_holds_what_an_embedded_write_holds(tmp_path: Path) -> None:
    """Same ids, vectors, metadata and texts, bit for bit; and the folder opens embedded afterwards."""
    rng = np.random.default_rng(3)
    ids = [f"{i:032x}" for i in range(12)]
    vectors = [rng.standard_normal((40 + i, 32)).astype(np.float32) for i in range(12)]
    vectors = [v / np.linalg.norm(v, axis=1, keepdims=True) for v in vectors]
    metas = [{"title": f"document {i}", "year": 2000 + i, "tags": ["a", str(i)]} for i in range(12)]
    texts = [f"text of document {i} " * (1 + 300 * (i % 2)) for i in range(12)]  # some longer than the snippet

    def write(path: Path, child: bool) -> None:
        with MultiVectorStore(path, writable=True, chroma_process=child) as store:
            store.add(ids[:8], vectors[:8], metas[:8], texts[:8])
            store.add(ids[8:], vectors[8:], metas[8:], texts[8:])
            store.update_metadata([ids[0]], [{"title": "renamed"}])
            assert store.delete([ids[5]]) == 1

    write(tmp_path / "embedded", False)
    write(tmp_path / "served", True)
    with MultiVectorStore(tmp_path / "embedded") as a, MultiVectorStore(tmp_path / "served") as b:
        expected, got = _records(a), _records(b)
        assert len(got) == 11 and got == expected
        hits_a = a.search(vectors[3][:5], top_k=5)
        hits_b = b.search(vectors[3][:5], top_k=5)
        assert [(h.id, h.score) for h in hits_a] == [(h.id, h.score) for h in hits_b]
    with MultiVectorStore(tmp_path / "served", writable=True) as store:  # embedded writes on top of the child's
        store.add([ids[5]], [vectors[5]], [metas[5]], [texts[5]])
        assert sorted(store.ids()) == sorted(ids)


def test_indexing_pdfs_through_the_child_stores_the_same_vectors(
    tmp_path: Path, tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder
) -> None:
    """``add_pdfs`` with the store behind its child: the vectors, texts and grid previews an embedded run stores."""
    files = [make_pdf(tmp_path / "pdfs" / f"doc{i}.pdf", f"child process document {i}", 1 + i % 3) for i in range(5)]
    stores = {}
    for label, child in (("embedded", False), ("served", True)):
        with DocPCIndex(tmp_path / label, encoder=tiny_encoder, writable=True, chroma_process=child) as index:
            report = index.add_pdfs(files, workers=0, batch_size=2)
            assert len(report.indexed) == 5 and not report.failed
        with MultiVectorStore(tmp_path / label) as store:
            stores[label] = _records(store, grids=True)
    assert stores["served"] == stores["embedded"] and len(stores["served"]) == 5
    assert all(grid for *_, grid in stores["served"].values())


def test_the_child_stops_with_its_store_and_the_lock_is_released_after_it(tmp_path: Path) -> None:
    store = MultiVectorStore(tmp_path / "s", writable=True, chroma_process=True)
    child = store._chroma_child
    assert child is not None and child.running and _answers(child.port)
    port = child.port
    store.close()
    assert not child.running and not _answers(port)
    with MultiVectorStore(tmp_path / "s", writable=True, chroma_process=True):
        with pytest.raises(StoreLockedError):  # the writer lock is this process's while its child serves
            MultiVectorStore(tmp_path / "s", writable=True)
    with MultiVectorStore(tmp_path / "s", writable=True) as again:  # released once both closed
        assert again.count() == 0


def test_each_shard_of_a_sharded_store_is_served_by_a_child_of_its_own(tmp_path: Path) -> None:
    from docpc_retrievers.store.shards import ShardedStore, open_store

    rng = np.random.default_rng(5)
    ids = [f"{i:032x}" for i in range(8)]
    vectors = [rng.standard_normal((10, 8)).astype(np.float32) for _ in ids]
    store = open_store(tmp_path / "s", shards=2, writable=True, chroma_process=True)
    assert isinstance(store, ShardedStore)
    try:
        ports = {shard._chroma_child.port for shard in store.shards if shard._chroma_child is not None}
        assert len(ports) == 2
        store.add(ids, [v / np.linalg.norm(v, axis=1, keepdims=True) for v in vectors], [{} for _ in ids])
    finally:
        store.close()
    assert not any(_answers(port) for port in ports)
    with open_store(tmp_path / "s") as reopened:
        assert sorted(reopened.ids()) == ids


_HOLDER = """
import sys, time
from docpc_retrievers.store.multivector import MultiVectorStore
store = MultiVectorStore(sys.argv[1], writable=True, chroma_process=True)
print(store._chroma_child.port, flush=True)
time.sleep(600)
"""


def test_a_killed_process_leaves_no_chroma_server_behind(tmp_path: Path) -> None:
    """SIGKILL gives the store no chance to stop its child: the child's watcher sees its input close and stops
    the server, so the port goes quiet and the folder can be opened again."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "s")], stdout=subprocess.PIPE,
                            env=subprocess_env(), text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert _answers(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 45
        while _answers(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _answers(port)
    finally:
        if proc.poll() is None:
            proc.kill()
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        assert store.count() == 0


def test_a_child_that_cannot_serve_says_which_folder_and_why(tmp_path: Path) -> None:
    folder = tmp_path / "chroma"
    folder.mkdir()
    (folder / "chroma.sqlite3").write_bytes(b"not a database " * 100)
    child = ChromaProcess(folder, start_timeout=30)
    with pytest.raises(StoreError) as err:
        child.start(attempts=1)
    assert str(folder) in str(err.value) and "not a database" in str(err.value)
    assert not child.running


def test_a_child_process_with_a_server_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="served by its Chroma server"):
        MultiVectorStore(tmp_path / "s", host="127.0.0.1", port=1, chroma_process=True)


def test_a_child_process_for_a_reader_is_refused(tmp_path: Path) -> None:
    with MultiVectorStore(tmp_path / "s", writable=True):
        pass
    with pytest.raises(ValueError, match="writable=True"):
        MultiVectorStore(tmp_path / "s", chroma_process=True)
    with MultiVectorStore(tmp_path / "s", writable=True) as store:  # the refusal held nothing: a writer opens
        assert store.count() == 0


def test_docpc_index_with_chroma_process(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The command line's flag: the run indexes, the store reads embedded afterwards, and with --host it is a
    usage error that creates nothing."""
    files = [make_pdf(tmp_path / "pdfs" / f"doc{i}.pdf", f"flag document {i}", 2) for i in range(3)]
    store = tmp_path / "store"
    run = run_docpc("index", tmp_path / "pdfs", "--store", store, "--model", tiny_checkpoint, "--chroma-process",
                    "--workers", "0", "--no-progress", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["indexed"] == 3
    with MultiVectorStore(store) as opened:
        assert opened.count() == 3
    refused = run_docpc("index", tmp_path / "pdfs", "--store", tmp_path / "other", "--host", "127.0.0.1",
                        "--chroma-process", "--model", tiny_checkpoint)
    assert refused.returncode == 2 and "--chroma-process" in refused.stderr
    assert not (tmp_path / "other").exists()
    assert files


def test_a_web_page_cannot_write_to_the_child(tmp_path: Path) -> None:
    """What docs/guide.md says of a page in the user's browser: a cross-origin request it may send without asking
    (a text/plain POST) is refused, and the preflight a JSON write needs is not allowed."""
    import urllib.error
    import urllib.request

    child = ChromaProcess(tmp_path / "chroma")
    child.start()
    url = f"http://127.0.0.1:{child.port}/api/v2/tenants/default_tenant/databases/default_database/collections"

    def send(method: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, str | None]:
        request = urllib.request.Request(url, method=method, data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.headers.get("Access-Control-Allow-Origin")
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("Access-Control-Allow-Origin")

    try:
        page = {"Origin": "http://page.example"}
        status, _ = send("POST", {**page, "Content-Type": "text/plain"}, json.dumps({"name": "from-a-page"}).encode())
        assert status == 415
        status, allowed = send("OPTIONS", {**page, "Access-Control-Request-Method": "POST",
                                           "Access-Control-Request-Headers": "content-type"})
        assert status >= 400 and allowed is None
        assert chromadb.HttpClient(host=child.host, port=child.port).list_collections() == []
    finally:
        child.stop()
