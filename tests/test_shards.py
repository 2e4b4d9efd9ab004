"""A store in shards: each document in the shard its id hashes to, a search merged from the shards' exact top k
that equals the whole store's, embedded and behind a real ``chroma run``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import make_pdf

from docpc_retrievers import DocPCIndex
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.records import ScoredDocument
from docpc_retrievers.store.search import SearchConfig
from docpc_retrievers.store.shards import ShardedStore, merge_top_k, open_store, recorded_shards, shard_of

DIM = 32
N = 120


@pytest.fixture(autouse=True)
def _fresh_chroma_systems() -> Iterator[None]:
    yield
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _corpus(n: int = N, seed: int = 0) -> tuple[list[str], list[np.ndarray], list[dict]]:
    rng = np.random.default_rng(seed)
    topics = _unit(rng.standard_normal((8, DIM)))
    ids = [f"{i:032x}" for i in range(n)]
    docs = []
    for _ in range(n):
        k = int(rng.integers(10, 30))
        docs.append(_unit(topics[rng.choice(8, size=k)] + 0.5 * _unit(rng.standard_normal((k, DIM)))))
    copies = docs[:1] * 6  # exact copies tie: the merge must keep the whole store's order (by id)
    docs[n - 6 :] = copies
    metas = [{"source": f"/docs/{i}.pdf", "group": "even" if i % 2 == 0 else "odd"} for i in range(n)]
    return ids, docs, metas


def _queries(docs: list[np.ndarray], seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in (0, 7, 33, 90 % len(docs)):
        rows = docs[i][rng.choice(len(docs[i]), size=6, replace=False)]
        out.append(_unit(rows + 0.2 * _unit(rng.standard_normal(rows.shape))))
    out.append(_unit(rng.standard_normal((2, DIM))))  # a 2-token query
    return out


CONFIG = SearchConfig(shortlist=8)
"""Stores this small are scored whole (exact); a short shortlist makes each shard's int8 pass cut among the tied
copies, as a large store's does."""


def _pairs(hits: list[ScoredDocument]) -> list[tuple[str, float]]:
    return [(h.id, round(h.score, 4)) for h in hits]


def _fill(store: MultiVectorStore | ShardedStore, ids: list[str], docs: list[np.ndarray], metas: list[dict]) -> None:
    store.add(ids[:70], docs[:70], metas[:70], texts=[f"text {i}" for i in range(70)])
    store.add(ids[70:], docs[70:], metas[70:], texts=[f"text {i}" for i in range(70, N)])


def _same_answers(one: MultiVectorStore, sharded: ShardedStore, queries: list[np.ndarray]) -> None:
    for q in queries:
        for kwargs in ({}, {"where": {"group": "even"}}, {"exhaustive": True}, {"n_candidates": 20}):
            assert _pairs(sharded.search(q, top_k=10, **kwargs)) == _pairs(one.search(q, top_k=10, **kwargs)), kwargs
        within = [d for d in one.ids() if int(d, 16) % 3 == 0]
        assert _pairs(sharded.search(q, top_k=5, ids=within)) == _pairs(one.search(q, top_k=5, ids=within))


def test_a_sharded_store_answers_what_one_store_answers_and_routes_by_id(tmp_path: Path) -> None:
    ids, docs, metas = _corpus()
    queries = _queries(docs)
    with MultiVectorStore(tmp_path / "one", writable=True, search=CONFIG) as one, \
            ShardedStore(tmp_path / "four", shards=4, writable=True, search=CONFIG) as four:
        _fill(one, ids, docs, metas)
        _fill(four, ids, docs, metas)
        sizes = [s.count() for s in four.shards]
        assert sum(sizes) == N == four.count() and min(sizes) > 0  # every shard holds some documents
        for i, shard in enumerate(four.shards):
            assert all(shard_of(d, 4) == i for d in shard.ids())  # each document where its id hashes
        assert sorted(four.ids()) == sorted(ids) and sorted(four.ids({"group": "odd"})) == sorted(one.ids({"group": "odd"}))
        _same_answers(one, four, queries)
        copies = four.search(docs[0], top_k=7)
        assert [h.id for h in copies] == [h.id for h in one.search(docs[0], top_k=7)]
        assert {h.id for h in copies} >= set(ids[N - 6 :])  # the tied copies, in the whole store's order
        assert [d.id for d in four.get([ids[5], "nope", ids[2]])] == [ids[5], ids[2]]
        assert four.texts([ids[3], ids[100]]) == {ids[3]: "text 3", ids[100]: "text 100"}
        # a deletion reaches the document's shard, and the merge stays the whole store's
        gone = [h.id for h in four.search(queries[0], top_k=3)]
        assert four.delete(gone) == 3 and one.delete(gone) == 3
        assert four.count() == N - 3 and not any(d in four for d in gone)
        _same_answers(one, four, queries)
    assert recorded_shards(tmp_path / "four") == 4 and recorded_shards(tmp_path / "one") is None
    with open_store(tmp_path / "four", search=CONFIG) as reopened:  # the count is found, not given
        assert isinstance(reopened, ShardedStore) and reopened.count() == N - 3
    with pytest.raises(StoreError, match="has 4 shards"):
        ShardedStore(tmp_path / "four", shards=2, writable=True)


def test_merging_keeps_the_best_k_of_all_shards_ties_by_id() -> None:
    def hit(doc_id: str, score: float) -> ScoredDocument:
        return ScoredDocument(doc_id, score, {})

    merged = merge_top_k([[hit("b", 3.0), hit("d", 1.0)], [hit("a", 3.0), hit("c", 2.0)], []], 3)
    assert [(h.id, h.score) for h in merged] == [("a", 3.0), ("b", 3.0), ("c", 2.0)]
    assert merge_top_k([[], []], 5) == []
    counts = np.bincount([shard_of(f"{i:032x}", 4) for i in range(4000)], minlength=4)
    assert counts.min() > 900  # ids spread evenly


def test_shards_behind_chroma_run_are_found_by_a_reader_with_only_the_address(tmp_path: Path) -> None:
    from docpc_retrievers.testing.chroma_server import chroma_server

    ids, docs, metas = _corpus(60, seed=3)
    with chroma_server(tmp_path / "chroma-data") as server:
        where = {"host": server.host, "port": server.port, "collection": "sharded"}
        with ShardedStore(tmp_path / "writer-cache", shards=3, writable=True, search=CONFIG, **where) as writer:
            writer.add(ids, docs, metas)
        assert recorded_shards(tmp_path / "elsewhere", **where) == 3
        with open_store(tmp_path / "reader-cache", search=CONFIG, **where) as reader, \
                MultiVectorStore(tmp_path / "one", writable=True, search=CONFIG) as one:
            assert isinstance(reader, ShardedStore) and reader.count() == 60
            one.add(ids, docs, metas)
            for q in _queries(docs)[:3]:
                assert _pairs(reader.search(q, top_k=10)) == _pairs(one.search(q, top_k=10))


def test_an_index_in_shards_indexes_searches_and_reopens_without_being_told(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    for i in range(6):
        make_pdf(tmp_path / "docs" / f"s{i}.pdf", f"sharded document {i}", 2)
    with DocPCIndex.from_pdfs([tmp_path / "docs"], tmp_path / "store", encoder=tiny_encoder, workers=0,
                              shards=3) as index:
        assert isinstance(index.store, ShardedStore) and len(index) == 6
        found = index.search("sharded document", top_k=6)
        info = index.info()
    assert info["shards"] == 3 and info["documents"] == 6
    with DocPCIndex(tmp_path / "store", encoder=tiny_encoder) as again:
        assert isinstance(again.store, ShardedStore)
        assert [(r.id, r.score) for r in again.search("sharded document", top_k=6)] == [(r.id, r.score) for r in found]
        assert again.text(found[0].id) and again.grid_image(found[0].id).size[0] > 0


def test_the_command_line_makes_a_sharded_store_and_info_says_so(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from docpc_retrievers.cli.app import main

    for i in range(4):
        make_pdf(tmp_path / "docs" / f"c{i}.pdf", f"command line shard {i}", 1)
    store = str(tmp_path / "store")
    assert main(["index", str(tmp_path / "docs"), "--store", store, "--model", str(tiny_checkpoint), "--shards", "2",
                 "--workers", "0", "--json"]) == 0
    capsys.readouterr()
    assert main(["info", "--store", store, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["shards"] == 2 and info["documents"] == 4
    assert main(["search", "command line shard", "--store", store, "-k", "4", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4
