"""Shard searchers on loopback: Chroma and one ``docpc serve-shard`` per shard, a reader that holds no shard's data
answering what a local sharded search answers, and a searcher that is down named in the error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from e2e_helpers import make_pdf

from docpc_retrievers import DocPCIndex
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.shards import ShardedStore, shard_of
from docpc_retrievers.testing.chroma_server import chroma_server

DIM = 32
SHARDS = 4


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _docs(n: int) -> tuple[list[str], list[np.ndarray], list[dict]]:
    rng = np.random.default_rng(5)
    topics = _unit(rng.standard_normal((6, DIM)))
    docs = [_unit(topics[rng.choice(6, size=int(rng.integers(8, 24)))] + 0.5 * _unit(rng.standard_normal((1, DIM))))
            for _ in range(n)]
    return [f"{i:032x}" for i in range(n)], docs, [{"source": f"/d/{i}.pdf", "half": i % 2} for i in range(n)]


class _Searcher:
    """One ``docpc serve-shard`` process, its address read from its readiness line."""

    def __init__(self, cache: Path, shard: int, host: str, port: int, *extra: str) -> None:
        exe = Path(sys.executable).with_name("docpc")
        self.proc = subprocess.Popen(
            [str(exe), "serve-shard", "--store", str(cache), "--shard", str(shard), "--host", host, "--port", str(port),
             "--collection", "farm", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"ready at (http://\S+)", line)
        if found is None:
            self.stop()
            raise AssertionError(f"shard {shard}'s searcher did not start: {line!r} {self.proc.stderr.read()!r}")
        self.url = found.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, list[_Searcher], Path]]:
    base = tmp_path_factory.mktemp("farm")
    ids, docs, metas = _docs(80)
    with chroma_server(base / "chroma") as server:
        where = {"host": server.host, "port": server.port, "collection": "farm"}
        with ShardedStore(base / "writer", shards=SHARDS, writable=True, **where) as writer:
            writer.add(ids, docs, metas, texts=[f"text {i}" for i in range(len(ids))])
        # four searchers on this machine's cores, each given one thread, as docs/store.md says to
        searchers = [_Searcher(base / f"searcher-{i}", i, server.host, server.port, "--threads", "1")
                     for i in range(SHARDS)]
        try:
            yield where, searchers, base
        finally:
            for s in searchers:
                s.stop()


def test_a_reader_with_shard_searchers_answers_what_a_local_sharded_search_answers(
    farm: tuple[dict, list[_Searcher], Path]
) -> None:
    where, searchers, base = farm
    ids, docs, _ = _docs(80)
    rng = np.random.default_rng(9)
    with ShardedStore(base / "local", **where) as local, \
            ShardedStore(base / "thin", searchers=[s.url for s in searchers], **where) as thin:
        for i in (3, 40, 77):
            q = _unit(docs[i][:4] + 0.2 * _unit(rng.standard_normal((4, DIM))))
            for kwargs in ({}, {"where": {"half": 1}}, {"ids": ids[::3]}):
                want = local.search(q, top_k=8, with_text=True, with_vectors=True, **kwargs)
                got = thin.search(q, top_k=8, with_text=True, with_vectors=True, **kwargs)
                assert [(h.id, round(h.score, 5)) for h in got] == [(h.id, round(h.score, 5)) for h in want], kwargs
                assert [h.text for h in got] == [h.text for h in want]
                assert all(np.array_equal(a.vectors, b.vectors) for a, b in zip(got, want))
        assert thin.count() == 80
        assert [httpx.get(f"{s.url}/health").json()["threads"] for s in searchers] == [1] * SHARDS
        # nothing of a shard's search was held by the thin reader: its caches hold no vectors or summaries
        held = sum(f.stat().st_size for f in (base / "thin").rglob("*") if f.is_file() and "chroma" not in f.parts)
        assert held < 64 * 1024, held


def test_a_searcher_that_is_down_is_named(farm: tuple[dict, list[_Searcher], Path], tmp_path: Path) -> None:
    where, searchers, _ = farm
    urls = [s.url for s in searchers]
    urls[2] = "http://127.0.0.1:9"  # nothing listens there
    with ShardedStore(tmp_path / "reader", searchers=urls, **where) as reader:
        with pytest.raises(StoreError, match=r"shard 2's searcher at http://127.0.0.1:9 did not answer"):
            reader.search(_unit(np.ones((2, DIM))), top_k=3)
    with pytest.raises(StoreError, match="4 shards; 3 searchers"):
        ShardedStore(tmp_path / "reader2", searchers=urls[:3], **where)


def test_asked_for_a_partial_answer_a_reader_answers_from_the_searchers_that_answer_and_marks_it(
    farm: tuple[dict, list[_Searcher], Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where, searchers, base = farm
    ids, docs, _ = _docs(80)
    urls = [s.url for s in searchers]
    urls[1] = "http://127.0.0.1:9"  # shard 1's searcher is down
    held_by_1 = next(i for i in range(80) if shard_of(ids[i], SHARDS) == 1)
    q = _unit(docs[held_by_1][:4] + 0.1)
    with ShardedStore(base / "local-p", **where) as local, \
            ShardedStore(tmp_path / "reader", searchers=urls, **where) as reader:
        whole = local.search(q, top_k=80)
        want = [(h.id, round(h.score, 5)) for h in whole if shard_of(h.id, SHARDS) != 1][:6]  # the others' best
        assert len(want) == 6 and want != [(h.id, round(h.score, 5)) for h in whole[:6]]  # shard 1 held some
        with caplog.at_level("WARNING", logger="docpc_retrievers.store.remote_shards"):
            got = reader.search(q, top_k=6, partial=True, with_text=True)
        assert [(h.id, round(h.score, 5)) for h in got] == want
        assert all(h.metadata["missing_shards"] == [1] for h in got)
        assert any("shard 1's searcher at http://127.0.0.1:9" in r.getMessage() for r in caplog.records)
        assert [h.text for h in got] == [f"text {ids.index(h.id)}" for h in got]
        with pytest.raises(StoreError, match=r"no match to mark as partial: shard 1 did not answer"):
            reader.search(q, top_k=6, partial=True, where={"half": 7})  # the others match nothing: no hit to mark
        whole_answer = ShardedStore(tmp_path / "whole", searchers=[s.url for s in searchers], **where)
        with whole_answer:  # every searcher answering: the whole store's answer, unmarked
            assert all("missing_shards" not in h.metadata for h in whole_answer.search(q, top_k=6, partial=True))
    with ShardedStore(tmp_path / "none", searchers=["http://127.0.0.1:9"] * SHARDS, **where) as none:
        with pytest.raises(StoreError, match="no shard searcher answered"):
            none.search(q, top_k=3, partial=True)


def test_docpc_search_with_searchers_answers_as_the_store_searched_here(
    tmp_path: Path, tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index built in shards behind ``chroma run``, two searchers, and ``docpc search --searcher`` (the model
    loaded in the command, the shards searched by the searchers) giving what a search in this process gives."""
    from docpc_retrievers.cli.app import main

    for i in range(5):
        make_pdf(tmp_path / "docs" / f"w{i}.pdf", f"searcher document {i}", 1)
    last, again = tmp_path / "docs" / "w4.pdf", 0
    while len({shard_of(document_id(p), 2) for p in (tmp_path / "docs").glob("*.pdf")}) < 2:
        again += 1  # ids hash the files' bytes, which differ run to run: both shards must hold some
        make_pdf(last, f"searcher document 4 ({again})", 1)
    with chroma_server(tmp_path / "chroma") as server:
        where = {"host": server.host, "port": server.port, "collection": "farm"}
        with DocPCIndex.from_pdfs([tmp_path / "docs"], tmp_path / "writer", encoder=tiny_encoder, workers=0,
                                  shards=2, **where) as index:
            assert len(index) == 5
        common = ["search", "searcher document", "--host", server.host, "--port", str(server.port), "--collection",
                  "farm", "--model", str(tiny_checkpoint), "-k", "5", "--json"]
        assert main([*common, "--store", str(tmp_path / "here")]) == 0  # the shards searched in this process
        expected = [(r["id"], round(r["score"], 4)) for r in json.loads(capsys.readouterr().out)]
        searchers = [_Searcher(tmp_path / f"s{i}", i, server.host, server.port) for i in range(2)]
        try:
            code = main([*common, "--store", str(tmp_path / "reader"), "--searcher", searchers[0].url,
                         "--searcher", searchers[1].url])
            got = [(r["id"], round(r["score"], 4)) for r in json.loads(capsys.readouterr().out)]
            one_down = [*common[:-1], "--store", str(tmp_path / "reader"), "--searcher", searchers[0].url,
                        "--searcher", "http://127.0.0.1:9"]
            assert main(one_down) != 0
            assert "shard 1's searcher at http://127.0.0.1:9 did not answer" in capsys.readouterr().err
            assert main([*one_down, "--partial"]) == 0
            partial = capsys.readouterr().out
            served = _served_through(tmp_path, tiny_checkpoint, server, [s.url for s in searchers])
        finally:
            for s in searchers:
                s.stop()
    assert code == 0
    assert len(got) == 5 and got == expected
    assert "partial: shard 1 did not answer" in partial
    shown = re.findall(r"id=([0-9a-f]+)", partial)
    assert shown and all(shard_of(i, 2) == 0 for i in shown)  # shard 0's documents, ranked as before
    assert shown == [i for i, _ in expected if shard_of(i, 2) == 0]
    assert served == expected  # `docpc serve --searcher`: the JSON API (and MCP, the same service) answers alike


def _served_through(tmp_path: Path, checkpoint: Path, server: Any, searchers: list[str]) -> list[tuple[str, float]]:
    """`docpc serve` reading the sharded store through its searchers: its /search answer, and its folder holding no
    shard's vectors (its prefetch does nothing)."""
    exe = Path(sys.executable).with_name("docpc")
    proc = subprocess.Popen(
        [str(exe), "serve", "--store", str(tmp_path / "served"), "--host", server.host, "--port", str(server.port),
         "--collection", "farm", "--model", str(checkpoint), "--bind", "127.0.0.1:0",
         *(arg for url in searchers for arg in ("--searcher", url))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"ready at (http://\S+)", line)
        assert found, (line, proc.stderr.read() if proc.stderr else "")
        answer = httpx.post(f"{found.group(1)}/search", json={"query": "searcher document", "k": 5}, timeout=120)
        assert answer.status_code == 200, answer.text
        hits = answer.json()["results"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    held = sum(f.stat().st_size for f in (tmp_path / "served").rglob("vec-*.bin"))
    assert held == 0, held
    return [(r["id"], round(r["score"], 4)) for r in hits]


def test_a_new_replica_starts_from_a_searchers_snapshot_and_follows_the_feed_from_there(
    farm: tuple[dict, list[_Searcher], Path]
) -> None:
    """``docpc serve-shard --from URL``: the new replica's cache is the other searcher's (the same vectors, fetched
    from no one else), and a document another writer adds or deletes afterwards is found, or gone, on its next
    search."""
    from docpc_retrievers.store.shard_routing import shard_of

    where, searchers, base = farm
    source = searchers[0]
    with ShardedStore(base / "warm-it", searchers=[s.url for s in searchers], **where) as thin:
        thin.search(_unit(np.ones((3, DIM))), top_k=5)  # the searcher has answered: its view is built
    exe = Path(sys.executable).with_name("docpc")
    proc = subprocess.Popen(
        [str(exe), "serve-shard", "--store", str(base / "replica"), "--shard", "0", "--host", where["host"],
         "--port", str(where["port"]), "--collection", "farm", "--from", source.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"ready at (http://\S+)", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        replica = found.group(1)
        cached = lambda root: set(np.load(root / "shards" / "0" / "cache" / "vectors.npz")["ids"].tolist())  # noqa: E731
        assert cached(base / "replica") == cached(base / "searcher-0") != set()
        # another writer adds a document to shard 0 and deletes one there, after the snapshot
        ids, docs, metas = _docs(80)
        new_id = next(f"{i:032x}" for i in range(1000, 2000) if shard_of(f"{i:032x}", SHARDS) == 0)
        gone = next(d for d in ids if shard_of(d, SHARDS) == 0)
        with ShardedStore(base / "writer", writable=True, **where) as writer:
            writer.add([new_id], [docs[0]], [{"source": "/d/new.pdf", "half": 0}])
            assert writer.delete([gone]) == 1
        urls = [replica, *(s.url for s in searchers[1:])]
        with ShardedStore(base / "reader-of-replica", searchers=urls, **where) as thin:
            hits = thin.search(docs[0], top_k=80)
            assert new_id in {h.id for h in hits} and gone not in {h.id for h in hits}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_shard_searcher_reachable_from_other_machines_needs_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule as ``docpc serve``: any address but loopback needs a token, said before anything opens."""
    from docpc_retrievers.cli.app import main

    monkeypatch.delenv("DOCPC_SERVE_TOKEN", raising=False)
    with pytest.raises(SystemExit) as caught:
        main(["serve-shard", "--store", str(tmp_path / "nothing"), "--shard", "0", "--bind", "0.0.0.0:0"])
    assert caught.value.code == 2 and "give --token" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()
