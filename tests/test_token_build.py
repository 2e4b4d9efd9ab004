"""A missing token stage built in the background on a large store: queries answered meanwhile, changes made during
the build applied, a build stopped by ``close`` or taken over by ``warm``, a failed one started again."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.store import view as view_module
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search import token_build
from docpc_retrievers.store.search import tokens as token_module
from docpc_retrievers.store.search.token_build import TokenStageBuild
from docpc_retrievers.store.search.two_stage import (
    NO_TOKEN_STAGE_SHORT_FACTOR,
    SHORT_QUERY_FACTOR,
    _short_top,
)
from docpc_retrievers.store.view import StoreView

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.timeout(120)]

DIM = 32
N = 80


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _docs(n: int, seed: int, rows: int = 40) -> list[np.ndarray]:
    """Documents sharing one popular topic: every summary looks alike, single vectors tell them apart."""
    rng = np.random.default_rng(seed)
    topic = _unit(rng.standard_normal(DIM))
    return [_unit(topic + 0.8 * _unit(rng.standard_normal((rows, DIM)))) for _ in range(n)]


def _ids(n: int, start: int = 0) -> list[str]:
    return [f"{i:032x}" for i in range(start, start + n)]


@pytest.fixture(autouse=True)
def large_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """80 documents count as a large store (built in the background), read and added a few at a time; lists trained
    on a few thousand vectors and every list probed (the index answers exactly)."""
    monkeypatch.setattr(view_module, "INLINE_BUILD_MAX", 10)
    monkeypatch.setattr(token_build, "READ_CHUNK", 8)
    monkeypatch.setattr(token_build, "ADD_CHUNK", 16)
    monkeypatch.setattr(token_module, "N_LISTS", 16)
    monkeypatch.setattr(token_module, "TRAIN_MIN", 2000)
    monkeypatch.setattr(token_module, "N_PROBE", 16)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds the background build at its first add to faiss (outside the store's lock) until set."""
    opened = threading.Event()
    original = TokenStageBuild._flush

    def held(self: TokenStageBuild) -> None:
        if threading.current_thread().name == "docpc-token-stage":
            assert opened.wait(60), "the test never let the build go on"
        original(self)

    monkeypatch.setattr(TokenStageBuild, "_flush", held)
    yield opened
    opened.set()


def _store_without_cache(path: Path, docs: list[np.ndarray], ids: list[str]) -> None:
    """A store written elsewhere: this machine has its records in Chroma and no cache."""
    with MultiVectorStore(path, writable=True, n_candidates=4) as store:
        store.add(ids, docs, [{} for _ in ids])
    shutil.rmtree(path / "cache")


def _short_query(doc: np.ndarray) -> np.ndarray:
    return _unit(doc[[0, 7]] + 0.01)  # two tokens, each close to one vector of the document


def _wait(reader: MultiVectorStore, build: TokenStageBuild | None) -> None:
    assert build is not None and build._thread is not None
    build._thread.join(60)
    assert not build.running


def test_a_large_store_builds_its_token_stage_in_the_background_answering_meanwhile_and_applying_changes(
    tmp_path: Path, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    docs, ids = _docs(N, seed=1), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    query = _short_query(docs[5])
    with caplog.at_level(logging.WARNING, logger="docpc_retrievers.store.view"), \
            MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        hits = reader.search(query, top_k=3)  # answered from the summaries while the build waits at the gate
        assert len(hits) == 3 and reader.token_stage == "building"
        assert "building it in the background" in caplog.text and "docpc warm" in caplog.text
        view = reader._view
        assert view is not None and view.tokens is None
        wide = view.search.candidates(query, 4, None)  # no token stage yet: 16 x n_candidates from the summaries
        assert wide == view.index.top(query, NO_TOKEN_STAGE_SHORT_FACTOR * 4) and len(wide) == 64
        assert view.search.candidates(query, 4, None, explicit=True) == view.index.top(query, 4)  # a count given: kept
        build = view._build
        more_docs, more = _docs(10, seed=2), _ids(10, start=N)
        with MultiVectorStore(tmp_path / "s", writable=True) as writer:  # another process in real life
            writer.delete([ids[20], ids[30]])
            writer.add(more, more_docs, [{} for _ in more])
        reader.refresh()  # while the build is held: these changes come after its list of ids
        assert build is not None and {ids[20], ids[30], *more} <= build.touched
        gate.set()
        _wait(reader, build)
        assert reader.token_stage == "ready" and view.tokens is not None and view._build is None
        assert set(view.tokens.ids()) == (set(ids) | set(more)) - {ids[20], ids[30]}
        exact = reader.search(query, top_k=3, exhaustive=True)
        assert [h.id for h in reader.search(query, top_k=3)] == [h.id for h in exact]
        new_query = _short_query(more_docs[4])
        assert more[4] in view.search.candidates(new_query, 4, None)  # added during the build, found by its tokens
    assert (tmp_path / "s" / "cache" / "token_stage" / "current.json").is_file()  # saved when handed over

    def no_build(self: StoreView) -> None:
        raise AssertionError("the saved token stage was not used")

    with pytest.MonkeyPatch.context() as mp, MultiVectorStore(tmp_path / "s", n_candidates=4) as again:
        mp.setattr(StoreView, "_new_build", no_build)
        assert again.search(query, top_k=1)[0].id == exact[0].id and again.token_stage == "ready"


def test_closing_a_reader_stops_its_background_build(tmp_path: Path, gate: threading.Event) -> None:
    docs, ids = _docs(N, seed=3), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    reader = MultiVectorStore(tmp_path / "s", n_candidates=4)
    reader.search(_short_query(docs[1]), top_k=3)
    build = reader._view._build  # type: ignore[union-attr]
    assert build is not None and build.running
    threading.Timer(0.3, gate.set).start()  # the held add finishes; the build then sees it was stopped
    reader.close()
    assert not build.running and build.progress[0] < N  # stopped part-way, not finished
    assert not (tmp_path / "s" / "cache" / "token_stage" / "current.json").exists()
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as again:  # the cache it filled is whole
        again.count()
        assert again.token_stage == "absent" and len(again.ids()) == N


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_the_background_build_runs_at_a_lower_priority_than_the_queries(tmp_path: Path, gate: threading.Event) -> None:
    """Queries and the build on the same core: the build's thread yields (its nice value), the caller's is untouched."""
    docs, ids = _docs(N, seed=4), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if own >= 10:
        pytest.skip(f"the tests already run at nice {own}")
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        reader.search(_short_query(docs[1]), top_k=3)
        build = reader._view._build  # type: ignore[union-attr]
        assert build is not None and build.running and build._thread is not None
        tid = build._thread.native_id
        deadline = time.monotonic() + 10  # the thread lowers it first thing; it may not have run yet
        while os.getpriority(os.PRIO_PROCESS, tid) == own and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, tid) == token_build.BUILD_NICENESS > own
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
        gate.set()
        _wait(reader, build)
        assert reader.token_stage == "ready"
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own


def test_warm_takes_over_a_background_build_where_it_stands(
    tmp_path: Path, gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, ids = _docs(N, seed=4), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    read: list[str] = []
    original = StoreView._stored_vectors

    def counted(self: StoreView, chunk: list[str]) -> tuple[list[str], list[np.ndarray]]:
        read.extend(chunk)
        return original(self, chunk)

    monkeypatch.setattr(StoreView, "_stored_vectors", counted)
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        reader.search(_short_query(docs[2]), top_k=3)
        build = reader._view._build  # type: ignore[union-attr]
        assert build is not None
        threading.Timer(0.3, gate.set).start()
        report = reader.warm()
        assert not build.running and report["token_stage_built"] and reader.token_stage == "ready"
        assert sorted(read) == sorted(ids)  # each document read once: what the thread read was kept
        assert set(reader._view.tokens.ids()) == set(ids)  # type: ignore[union-attr]


def test_a_failed_background_build_is_logged_and_the_next_query_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    docs, ids = _docs(N, seed=5), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    original = StoreView._stored_vectors
    failures = [RuntimeError("Chroma went away")]

    def flaky(self: StoreView, chunk: list[str]) -> tuple[list[str], list[np.ndarray]]:
        if failures:
            raise failures.pop()
        return original(self, chunk)

    monkeypatch.setattr(StoreView, "_stored_vectors", flaky)
    query = _short_query(docs[3])
    with caplog.at_level(logging.WARNING), MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        assert len(reader.search(query, top_k=3)) == 3
        first = reader._view._build  # type: ignore[union-attr]
        _wait(reader, first)
        assert first is not None and isinstance(first.error, RuntimeError) and reader.token_stage == "absent"
        assert "Chroma went away" in caplog.text and str(tmp_path / "s") in caplog.text
        reader.search(query, top_k=3)  # starts another
        second = reader._view._build  # type: ignore[union-attr]
        assert second is not None and second is not first
        _wait(reader, second)
        assert reader.token_stage == "ready" and len(reader._view.tokens) == N  # type: ignore[union-attr, arg-type]


def test_a_small_store_builds_its_token_stage_while_the_query_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(view_module, "INLINE_BUILD_MAX", N)
    docs, ids = _docs(N, seed=6), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    started: list[Callable[[], None]] = []
    monkeypatch.setattr(TokenStageBuild, "start", lambda self: started.append(self.start))
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        reader.search(_short_query(docs[6]), top_k=3)
        assert not started and reader.token_stage == "ready"


def test_a_one_shot_search_on_a_large_store_builds_the_missing_token_stage_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`docpc search` would start a background build and stop it at exit: it builds the stage first, once."""
    import argparse

    from docpc_retrievers.cli.search import token_stage_first

    docs, ids = _docs(N, seed=7), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    args = argparse.Namespace(store=tmp_path / "s", no_progress=True)
    with MultiVectorStore(tmp_path / "s") as reader:
        assert token_stage_first(reader, args) and reader.token_stage == "ready"
        assert "no token-level first stage on this machine" in capsys.readouterr().err
        assert not token_stage_first(reader, args)  # built: nothing to do
        assert reader.describe(model="m", settings={}, page_cache={})["token_stage"] == "ready"  # docpc info
    assert (tmp_path / "s" / "cache" / "token_stage" / "current.json").is_file()
    with MultiVectorStore(tmp_path / "s") as reader:
        assert not token_stage_first(reader, args) and reader.token_stage == "ready"


def test_a_build_with_no_changes_meanwhile_is_saved_outside_the_lock_and_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 100k the token stage's write takes tens of seconds: a build saves its index before taking the lock to hand it
    over, and the hand-over writes nothing more when no document changed meanwhile."""
    docs, ids = _docs(N, seed=8), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        reader.count()
        reader._view.save()  # type: ignore[union-attr]  # the first-stage snapshot at the current position
        writes: list[tuple[str, bool]] = []
        original = token_module.TokenIndex.save

        def watched(self: token_module.TokenIndex, *args: object, **kwargs: object) -> None:
            writes.append((threading.current_thread().name, reader._mutex._is_owned()))  # type: ignore[attr-defined]
            original(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(token_module.TokenIndex, "save", watched)
        reader.search(_short_query(docs[8]), top_k=3)
        build = reader._view._build  # type: ignore[union-attr]
        _wait(reader, build)
        assert build is not None and build.saved and reader.token_stage == "ready"
        assert writes == [("docpc-token-stage", False)]  # once, by the build's thread, not holding the store's lock
        assert reader.cache.dirty  # the build fetched every document's vectors from Chroma
    assert len(writes) == 1  # closing saved the cache and the first stage, not the unchanged token stage again
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as again:
        again.count()
        assert again.token_stage == "ready" and len(again._view.tokens) == N  # type: ignore[union-attr, arg-type]


def test_a_view_answers_for_what_was_frozen_while_its_index_grows_and_the_index_saves_as_one(tmp_path: Path) -> None:
    docs, ids = _docs(120, seed=7), _ids(120)
    tokens = token_module.TokenIndex(DIM)
    tokens.add(ids[:60], docs[:60])
    view = tokens.view(0.5)  # trained at 50 documents: 60 documents' vectors, frozen
    tokens.add(ids[60:], docs[60:])  # the build goes on adding to a new part
    assert view.coverage == 0.5 and len(view) == 60 and len(tokens) == 120 and len(tokens._frozen) == 1
    for i in (0, 17, 59):
        assert view.top(_short_query(docs[i]), 1) == [ids[i]] == tokens.top(_short_query(docs[i]), 1)
    for i in (60, 99, 119):
        assert ids[i] not in view.top(_short_query(docs[i]), 20)  # added after the view was taken
        assert tokens.top(_short_query(docs[i]), 1) == [ids[i]]
    tokens.save(tmp_path / "ts")
    again = token_module.TokenIndex(DIM)
    again.load(tmp_path / "ts")
    assert not tokens._frozen and not again._frozen  # saved as one mapped index
    assert all(again.top(_short_query(docs[i]), 1) == [ids[i]] for i in range(0, 120, 7))
    assert view.top(_short_query(docs[17]), 1) == [ids[17]]  # the view's parts outlive the save
    with pytest.raises(ValueError, match="untrained"):
        token_module.TokenIndex(DIM).view(0.1)


@pytest.fixture
def held_after_publish(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds the background build just after it first hands queries a view of what it added, until set."""
    opened = threading.Event()
    original = TokenStageBuild._publish

    def held(self: TokenStageBuild) -> None:
        original(self)
        if self.partial is not None:
            assert opened.wait(60), "the test never let the build go on"

    monkeypatch.setattr(TokenStageBuild, "_publish", held)
    yield opened
    opened.set()


def _first_view(reader: MultiVectorStore, doc: np.ndarray) -> tuple[StoreView, token_module.TokenIndex | None]:
    """Start the build with a short query and wait until it hands queries its first view (held there)."""
    reader.search(_short_query(doc), top_k=3)
    view = reader._view
    assert view is not None and view._build is not None
    for _ in range(600):
        if view._build.partial is not None:
            break
        threading.Event().wait(0.05)
    return view, view._token_stage()


def test_queries_during_a_background_build_take_candidates_from_the_part_built_so_far(
    tmp_path: Path, held_after_publish: threading.Event
) -> None:
    docs, ids = _docs(N, seed=8), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        view, partial = _first_view(reader, docs[0])
        assert reader.token_stage == "building" and view.tokens is None
        assert partial is view._build.partial and partial is not None and 0 < partial.coverage < 1
        assert partial.coverage == len(partial) / N
        covered = [i for i, doc_id in enumerate(ids) if doc_id in set(partial.ids())]
        assert len(covered) >= 16 and len(covered) == len(partial)
        added = 0
        for i in covered:  # the part built so far adds its best to the summaries' (the query's count: 2 of each)
            q = _short_query(docs[i])
            own = _short_top(partial, q, 2, None)
            summaries = view.index.top(q, 2, set(ids) - partial.covered)  # the rest of the store's best
            assert own[0] == ids[i] and view.search.candidates(q, 2, None, explicit=True) == list(
                dict.fromkeys([*own, *summaries]))
            added += bool(set(own) - set(view.index.top(q, 2)))
        assert added > 0
        q = _short_query(docs[covered[0]])  # counts of its own: the summaries' 16x, the part's share of 4x
        count = max(4, round(SHORT_QUERY_FACTOR * partial.coverage * 4))
        wide = view.index.top(q, NO_TOKEN_STAGE_SHORT_FACTOR * 4, set(ids) - partial.covered)
        assert view.search.candidates(q, 4, None) == list(dict.fromkeys([*_short_top(partial, q, count, None), *wide]))
        assert reader.search(q, top_k=1)[0].id == ids[covered[0]]
        held_after_publish.set()
        _wait(reader, view._build)
        assert reader.token_stage == "ready" and len(view.tokens) == N  # type: ignore[arg-type]
        assert not view.tokens._frozen  # type: ignore[union-attr]  (saved and mapped back as one index)


def test_a_document_replaced_after_its_part_was_handed_to_queries_is_found_by_its_new_vectors(
    tmp_path: Path, held_after_publish: threading.Event
) -> None:
    docs, ids = _docs(N, seed=9), _ids(N)
    _store_without_cache(tmp_path / "s", docs, ids)
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        view, partial = _first_view(reader, docs[0])
        assert partial is not None and 0 < partial.coverage < 1
        old = partial.covered
        replaced = sorted(old)[3]
        new_doc = _docs(1, seed=10)[0]  # other vectors under the same id
        with MultiVectorStore(tmp_path / "s", writable=True) as writer:  # another process in real life
            writer.add([replaced], [new_doc], [{}])
        reader.refresh()
        assert replaced in view._build.touched
        assert partial.covered == old - {replaced} and partial.covered is not old  # a new set: a new skip mask
        q = _short_query(new_doc)
        assert replaced not in _short_top(partial, q, 4, None)  # the part holds its old vectors only
        assert replaced in view.search.candidates(q, 4, None)  # the summaries rank its new ones
        assert reader.search(q, top_k=1)[0].id == replaced
        held_after_publish.set()
        _wait(reader, view._build)
        assert reader.token_stage == "ready" and replaced in view.search.candidates(q, 4, None)
