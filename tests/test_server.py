"""A real ``chroma run`` server on loopback: readers with nothing but the address, concurrent writers, kills, restarts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import docpc_command, make_pdf, run_docpc, run_docpc_parallel, subprocess_env

from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.testing.chroma_server import ChromaServer

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    srv = ChromaServer(tmp_path_factory.mktemp("chroma-data"))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _pdfs(folder: Path, labels: range) -> list[Path]:
    return [make_pdf(folder / f"doc{i:02d}.pdf", f"server document {i} about topic {i % 3}", 1 + i % 3) for i in labels]


def _on(server: ChromaServer, collection: str) -> list[str]:
    return ["--host", server.host, "--port", str(server.port), "--collection", collection]


_READER = """
import json, sys
from docpc_retrievers import DocPCIndex
store, host, port, collection, model = sys.argv[1:6]
index = DocPCIndex(store, host=host, port=int(port), collection=collection, model=model)
for line in sys.stdin:
    results = index.search(line.strip(), 20)
    grid = index.grid_image_bytes(results[0].id) if results else b""
    print(json.dumps({"ids": [r.id for r in results], "evidence": [len(r.evidence_pages) for r in results],
                      "grid": grid[8:12].decode(errors="replace")}), flush=True)
"""


def test_a_reader_with_only_the_server_address_searches_and_sees_later_writes(
    tmp_path: Path, server: ChromaServer, tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder
) -> None:
    files = _pdfs(tmp_path / "pdfs", range(4))
    with DocPCIndex.from_pdfs(files[:3], tmp_path / "writer", encoder=tiny_encoder, host=server.host,
                              port=server.port, collection="shared-reader") as writer:
        assert len(writer) == 3
        empty = tmp_path / "reader-dir"  # a reader on "another machine": an empty local directory
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(empty), server.host, str(server.port), "shared-reader",
             str(tiny_checkpoint)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
        )
        try:
            def ask(query: str) -> dict:
                assert reader.stdin is not None and reader.stdout is not None
                reader.stdin.write(query + "\n")
                reader.stdin.flush()
                line = reader.stdout.readline()
                assert line, reader.stderr.read() if reader.stderr else "reader died"
                return json.loads(line)

            first = ask("server document topic")
            assert sorted(first["ids"]) == sorted(document_id(f) for f in files[:3])
            assert all(n > 0 for n in first["evidence"]) and first["grid"] == "WEBP"
            writer.add_pdfs([files[3]])
            writer.delete([document_id(files[0])])
            second = ask("server document topic")
            assert sorted(second["ids"]) == sorted(document_id(f) for f in files[1:])
        finally:
            reader.kill()
            reader.wait(timeout=30)
    assert not (empty / "chroma").exists(), "the reader kept no database of its own"


def test_two_writers_at_once_lose_nothing_and_duplicate_nothing(
    tmp_path: Path, server: ChromaServer, tiny_checkpoint: Path
) -> None:
    a = _pdfs(tmp_path / "a", range(0, 6))
    b = _pdfs(tmp_path / "b", range(6, 9))
    for f in a[3:]:  # three files in both folders: same bytes, same ids
        b.append(Path(shutil.copy(f, tmp_path / "b" / f"copy-{f.name}")))
    commands = {
        name: ["index", tmp_path / name, "--store", tmp_path / f"local-{name}", "--model", tiny_checkpoint,
               "--commit-every", "1", "--json", *_on(server, "shared-writers")]
        for name in ("a", "b")
    }
    runs = run_docpc_parallel(commands, tmp_path / "logs")
    for run in runs.values():
        assert run.returncode == 0, run.describe()
    expected = {document_id(f) for f in [*a, *b]}
    assert len(expected) == 9
    with DocPCIndex(tmp_path / "check", host=server.host, port=server.port, collection="shared-writers") as index:
        assert sorted(index.store.ids()) == sorted(expected)
        for doc_id in expected:
            assert index.store.vectors(doc_id).shape[0] > 0 and index.grid_image_bytes(doc_id)[8:12] == b"WEBP"
        blobs = index.store.engine.blobs.get(include=["metadatas"])["metadatas"]
        assert {m["doc"] for m in blobs} == expected, "no payload without its document"


def _start_logged(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(argv, env=subprocess_env(), stdout=fh, stderr=subprocess.STDOUT)


def _wait_for_commits(proc: subprocess.Popen[bytes], log: Path, n: int) -> None:
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if log.read_text(errors="replace").count("documents (") >= n:  # the -v line "committed N documents (...)"
            return
        time.sleep(0.01)
    raise AssertionError(f"indexing ended (or stalled) before {n} commits:\n{log.read_text()}")


def test_kill_9_of_a_writer_loses_nothing_and_the_rerun_completes(
    tmp_path: Path, server: ChromaServer, tiny_checkpoint: Path
) -> None:
    files = _pdfs(tmp_path / "pdfs", range(16))
    args = ["index", tmp_path / "pdfs", "--store", tmp_path / "local", "--model", tiny_checkpoint,
            "--commit-every", "1", "--json", "-v", *_on(server, "shared-kill")]
    log = tmp_path / "killed.log"
    proc = _start_logged(docpc_command() + [os.fspath(a) for a in args], log)
    try:
        _wait_for_commits(proc, log, 2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    rerun = run_docpc(*args)
    assert rerun.returncode == 0, rerun.describe()
    report = json.loads(rerun.stdout)
    assert report["skipped"] >= 2 and report["skipped"] + report["indexed"] == len(files)
    with DocPCIndex(tmp_path / "check", host=server.host, port=server.port, collection="shared-kill") as index:
        assert sorted(index.store.ids()) == sorted(document_id(f) for f in files)


def test_server_stopped_mid_run_gives_a_clear_error_and_a_resumable_run(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    srv = ChromaServer(tmp_path / "data")
    srv.start()
    try:
        files = _pdfs(tmp_path / "pdfs", range(16))
        args = ["index", tmp_path / "pdfs", "--store", tmp_path / "local", "--model", tiny_checkpoint,
                "--commit-every", "1", "--json", "-v", *_on(srv, "restarted")]
        log = tmp_path / "stopped.log"
        proc = _start_logged(docpc_command() + [os.fspath(a) for a in args], log)
        try:
            _wait_for_commits(proc, log, 2)
            srv.stop()
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = log.read_text(errors="replace")
        assert proc.returncode == 1, text
        assert "cannot be reached" in text and "re-run" in text, text
        srv.start()
        rerun = run_docpc(*[a for a in args if a != "-v"])
        assert rerun.returncode == 0, rerun.describe()
        report = json.loads(rerun.stdout)
        assert report["skipped"] >= 2 and report["skipped"] + report["indexed"] == len(files)
        with DocPCIndex(tmp_path / "check", host=srv.host, port=srv.port, collection="restarted") as index:
            assert sorted(index.store.ids()) == sorted(document_id(f) for f in files)
    finally:
        srv.stop()


def test_a_server_starts_where_chromadb_has_no_chroma_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chromadb installed with ``pip --target`` (a GPU benchmark machine) leaves no ``chroma`` on PATH: a server is
    this interpreter running chromadb's Rust command line, and answers as a real server does."""
    import chromadb

    from docpc_retrievers.store import chroma_process

    command = chroma_process.chroma_command()
    assert command[:2] == [sys.executable, "-c"] and "chromadb_rust_bindings" in command[2]
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no chroma script to be found
    srv = ChromaServer(tmp_path / "data")
    srv.start()
    try:
        client = chromadb.HttpClient(host=srv.host, port=srv.port)
        client.get_or_create_collection("fallback-check").add(ids=["a"], embeddings=[[1.0, 0.0]])
        assert client.get_collection("fallback-check").count() == 1
        assert srv.proc is not None and srv.proc.args[:2] == [sys.executable, "-c"]
    finally:
        srv.stop()
