"""A reader never fails because a writer deletes: searches skip vanished documents and fill their slots."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import clear_chroma_cache, make_pdf, subprocess_env

from docpc_retrievers import DocPCIndex, DocumentNotFoundError
from docpc_retrievers.retrievers import RetrieverOptions, retrieve
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing.chroma_server import ChromaServer


pytestmark = pytest.mark.usefixtures("fresh_chroma")


def _docs(folder: Path, n: int, prefix: str = "stable") -> Path:
    for i in range(n):
        make_pdf(folder / f"{prefix}{i:02d}.pdf", f"{prefix} document {i} about topic {i % 3}", 1)
    return folder


def test_search_fills_the_slot_of_a_document_deleted_between_stages(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex.from_pdfs([_docs(tmp_path / "docs", 6)], tmp_path / "store", encoder=tiny_encoder, workers=0) as index:
        before = [r.id for r in index.search("stable document", 6)]
        store = index.store
        real = store.reader.metadata.get
        victims: list[str] = []

        def delete_first_then_fetch(ids: list[str]) -> dict[str, dict[str, Any]]:
            if not victims and ids:  # another writer deletes the best hit right after the first stage
                victims.append(ids[0])
                store.engine.delete([ids[0]])
                store.reader.metadata.forget(ids[0])
            return real(ids)

        store.reader.metadata.get = delete_first_then_fetch  # type: ignore[method-assign]
        results = index.search("stable document", 3)
        store.reader.metadata.get = real  # type: ignore[method-assign]
        assert victims == [before[0]]
        assert [r.id for r in results] == before[1:4]  # the slot went to the next candidate
        assert victims[0] not in {d.id for d in index.documents()}
        with pytest.raises(DocumentNotFoundError):
            index.metadata(victims[0])  # an explicit lookup of a vanished id still raises
        assert index.get([victims[0], before[1]])[0].id == before[1]  # get skips it


def test_framework_retrieve_skips_a_document_deleted_before_its_image_is_read(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    with DocPCIndex.from_pdfs([_docs(tmp_path / "docs", 5)], tmp_path / "store", encoder=tiny_encoder, workers=0) as index:
        first = [r.id for r in index.search("stable document", 5)]
        engine = index.store.engine
        real = engine.texts_and_records  # the hits' one read, which brings their grid pictures along
        deleted: list[str] = []

        def vanish(ids: list[str]) -> dict[str, Any]:
            if not deleted and ids:
                deleted.append(ids[0])
                engine.delete([ids[0]])  # as another process would
            return real(ids)

        engine.texts_and_records = vanish  # type: ignore[method-assign]
        hits = retrieve(index, "stable document", RetrieverOptions(top_k=3))
        assert deleted == [first[0]]
        assert [h.id for h in hits] == first[1:4] and all(h.image for h in hits)


_WRITER = """
import sys, time
from pathlib import Path
from docpc_retrievers import DocPCIndex
store, model, churn, stop, host, port = sys.argv[1:7]
kwargs = {"host": host, "port": int(port), "collection": "churn"} if host != "-" else {}
files = sorted(Path(churn).glob("*.pdf"))
rounds = 0
with DocPCIndex(store, model=model, writable=True, **kwargs) as index:
    while not Path(stop).exists() and rounds < 400:
        for f in files:
            index.delete([f])
            index.add_pdfs([f], workers=0)
        rounds += 1
print(rounds, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["embedded", "server"])
def test_readers_never_fail_while_another_process_deletes(
    tmp_path: Path, tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder, mode: str
) -> None:
    server = ChromaServer(tmp_path / "chroma-data") if mode == "server" else None
    if server is not None:
        server.start()
    on: dict[str, Any] = {"host": server.host, "port": server.port, "collection": "churn"} if server else {}
    try:
        stable = _docs(tmp_path / "stable", 4)
        churn = _docs(tmp_path / "churn", 4, prefix="churn")
        with DocPCIndex.from_pdfs([stable, churn], tmp_path / "writer-store", encoder=tiny_encoder, workers=0, **on):
            pass
        clear_chroma_cache()
        stop = tmp_path / "stop"
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path / "writer-store"), str(tiny_checkpoint), str(churn), str(stop),
             server.host if server else "-", str(server.port if server else 0)],
            env=subprocess_env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        reader_store = tmp_path / ("reader-cache" if server else "writer-store")
        failures: list[BaseException] = []
        counts: list[int] = []
        lock = threading.Lock()
        try:
            time.sleep(1.0)
            with DocPCIndex(reader_store, encoder=tiny_encoder, **on) as index:
                def read(n: int) -> None:
                    for i in range(n):
                        try:
                            hits = index.search(f"churn document {i % 4}", 6)
                            with lock:
                                counts.append(len(hits))
                                assert all(h.metadata.get("source") for h in hits)
                        except BaseException as exc:  # noqa: BLE001 - every failure is the finding
                            with lock:
                                failures.append(exc)

                threads = [threading.Thread(target=read, args=(250,)) for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            stop.touch()
            out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err.decode()[-3000:]
        assert int(out.decode().split()[-1]) >= 1, "the writer made no round of deletes and adds"
        assert not failures, f"{len(failures)} of 1000 searches failed: {failures[:3]!r}"
        assert len(counts) == 1000 and min(counts) >= 4  # the 4 stable documents are always there
    finally:
        if server is not None:
            server.stop()
