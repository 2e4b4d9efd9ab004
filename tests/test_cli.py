"""Acceptance tests of the ``docpc`` command line, run as real subprocesses on the PDF corpus.

One store is built per module with ``docpc index <corpus> --model TINY``; commands that
change a store run on ``shutil.copytree`` copies in a temporary folder. Each ``docpc``
process pays about 15 s of torch/colpali imports when it loads the model, so the
independent commands of the acceptance list run side by side in one module fixture
(``runs``) and each test checks its own part of the outcome; where a command's effect
is checked rather than the command itself, the check uses the Python API in-process. The kill-and-rerun and
second-writer cases run on their own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_helpers import (
    CORPUS,
    CORPUS_INDEXABLE,
    CORPUS_PDF_COUNT,
    ENCRYPTED,
    ENCRYPTED_PASSWORD,
    GEOTOPO,
    MINIMAL,
    ZERO_PAGES,
    Run,
    clear_chroma_cache,
    copy_store,
    docpc_command,
    make_pdf,
    needs_corpus,
    run_docpc,
    run_docpc_parallel,
    subprocess_env,
)

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.store.locking import WriterLock
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.testing import build_tiny_colqwen2

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow, needs_corpus]

RESULT_KEYS = {"id", "score", "source", "title", "total_pages", "selected_pages"}


@dataclass
class CorpusStore:
    path: Path
    run: Run  # the acceptance run: docpc index <corpus> --store S --model TINY --json


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> CorpusStore:
    store = tmp_path_factory.mktemp("cli_module") / "S"
    run = run_docpc("index", CORPUS, "--store", store, "--model", tiny_checkpoint, "--workers", "1", "--json")
    return CorpusStore(store, run)


@pytest.fixture(scope="module")
def other_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny checkpoint (seed 1) in another folder; its model_id (the folder) differs."""
    return build_tiny_colqwen2(tmp_path_factory.mktemp("cli_other_colqwen2") / "checkpoint", seed=1)


@dataclass
class Runs:
    work: Path
    stores: dict[str, Path]
    new_pdf: Path
    not_a_store: Path
    missing_model: Path
    results: dict[str, Run]

    def __getitem__(self, name: str) -> Run:
        return self.results[name]


@pytest.fixture(scope="module")
def runs(
    corpus_store: CorpusStore,
    tiny_checkpoint: Path,
    other_checkpoint: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Runs:
    """The independent acceptance commands, run in parallel: two phases (deletes, then everything else)."""
    work = tmp_path_factory.mktemp("cli_runs")
    main = corpus_store.path
    names = ("rerun", "password", "delete_id", "delete_path", "strategy_change", "pool_change")
    stores = {name: copy_store(main, work / "stores" / name) for name in names}
    new_pdf = make_pdf(work / "new" / "brand-new.pdf", "a brand new document")
    not_a_store = work / "not-a-store"
    not_a_store.mkdir()
    (not_a_store / "unrelated.txt").write_text("just a folder")
    missing_model = work / "no-such-model"
    relative_minimal = MINIMAL.relative_to(CORPUS)
    queries_file = work / "queries.txt"
    queries_file.write_text("anything\n\n   \ngeometry\n", encoding="utf-8")

    results = run_docpc_parallel(
        {
            "delete_id": ("delete", document_id(GEOTOPO), "--store", stores["delete_id"], "--json"),
            "delete_path": ("delete", relative_minimal, "--store", stores["delete_path"], "--json"),
        },
        work / "logs1",
        cwd={"delete_path": CORPUS},
    )
    results |= run_docpc_parallel(
        {
            "rerun": ("index", CORPUS, "--store", stores["rerun"], "--model", tiny_checkpoint, "--json"),
            "password": (
                "index", CORPUS, "--store", stores["password"], "--model", tiny_checkpoint,
                "--password", ENCRYPTED_PASSWORD, "--json",
            ),
            "search": ("search", "anything", "--store", main, "--top-k", "100", "--json"),
            "search_top0": ("search", "anything", "--store", main, "--top-k", "0", "--json"),
            "search_candidates": ("search", "anything", "--store", main, "--top-k", "3", "--candidates", "5", "--json"),
            "search_many": ("search", "anything", "geometry", "--store", main, "-k", "3", "--json"),
            "search_file": ("search", "--queries", queries_file, "--store", main, "-k", "3", "--json"),
            "search_file_text": ("search", "--queries", queries_file, "--store", main, "-k", "2"),
            "info": ("info", "--store", main, "--json"),
            "search_under": ("search", "anything", "--store", main, "--under", CORPUS / "009-pdflatex-geotopo",
                             "--under", MINIMAL, "-k", "100", "--json"),
            "show_default_report": ("show", "anything", "--store", main, "-k", "1"),
            "info_after_delete": ("info", "--store", stores["delete_id"], "--json"),
            "info_after_delete_path": ("info", "--store", stores["delete_path"], "--json"),
            "not_a_store": ("search", "anything", "--store", not_a_store, "--json"),
            "info_not_a_store": ("info", "--store", not_a_store),
            "missing_model_search": ("search", "anything", "--store", main, "--model", missing_model),
            "missing_model_index": ("index", new_pdf, "--store", work / "fresh", "--model", missing_model),
            "other_model_search": ("search", "anything", "--store", main, "--model", other_checkpoint),
            "strategy_change": ("index", new_pdf, "--store", stores["strategy_change"], "--strategy", "uniform"),
            "pool_change": ("index", new_pdf, "--store", stores["pool_change"], "--no-grids", "--pool-factor", "3"),
            "pool3_nogrids": (
                "index", new_pdf, "--store", work / "pool3", "--model", tiny_checkpoint, "--pool-factor", "3",
                "--no-grids", "--json",
            ),
            "workers2": (
                "index", CORPUS, "--store", work / "workers2", "--model", tiny_checkpoint, "--workers", "2", "--json",
            ),
        },
        work / "logs2",
        cwd={"show_default_report": work},
    )
    results["search_workers2"] = run_docpc("search", "anything", "--store", work / "workers2", "--top-k", "100", "--json")
    results["info_pool3"] = run_docpc("info", "--store", work / "pool3", "--json")
    results["info_pool3_text"] = run_docpc("info", "--store", work / "pool3")
    # Run after the parallel phase: it must find nothing left to delete.
    results["delete_path_again"] = run_docpc(
        "delete", relative_minimal, "--store", stores["delete_path"], cwd=CORPUS
    )
    return Runs(work, stores, new_pdf, not_a_store, missing_model, results)


def _count(store: Path) -> int:
    clear_chroma_cache()
    with DocPCIndex(store) as index:
        return len(index)


def _assert_clean_error(run: Run, code: int) -> None:
    assert run.returncode == code, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


# --------------------------------------------------------------------------- docpc index


def test_index_corpus_indexes_29_and_reports_2_failures(corpus_store: CorpusStore) -> None:
    run = corpus_store.run
    assert run.returncode == 3, run.describe()
    report = run.json()
    assert set(report) >= {"indexed", "skipped", "failed"}
    assert report["indexed"] == CORPUS_INDEXABLE
    assert report["skipped"] == 0
    assert len(report["failed"]) == 2
    failed = {Path(f["path"]): f["reason"] for f in report["failed"]}
    assert set(failed) == {ENCRYPTED, ZERO_PAGES}
    assert "password" in failed[ENCRYPTED].lower()
    assert "zero pages" in failed[ZERO_PAGES].lower()
    for path, reason in failed.items():
        assert str(path) in reason
    assert _count(corpus_store.path) == CORPUS_INDEXABLE


def test_index_with_two_workers_reports_and_ranks_like_one(runs: Runs, corpus_store: CorpusStore) -> None:
    one, two = corpus_store.run, runs["workers2"]
    assert two.returncode == one.returncode == 3, two.describe()
    assert two.json() == one.json()
    searched = runs["search_workers2"]
    assert searched.returncode == 0, searched.describe()
    assert searched.json() == runs["search"].json()
    assert len(searched.json()) == CORPUS_INDEXABLE


def test_index_again_skips_all_29(runs: Runs) -> None:
    run = runs["rerun"]
    assert run.returncode == 3, run.describe()  # the two bad files still fail
    report = run.json()
    assert report["indexed"] == 0
    assert report["skipped"] == CORPUS_INDEXABLE
    assert {Path(f["path"]) for f in report["failed"]} == {ENCRYPTED, ZERO_PAGES}
    assert _count(runs.stores["rerun"]) == CORPUS_INDEXABLE


def test_index_with_password_adds_the_encrypted_file(runs: Runs) -> None:
    run = runs["password"]
    assert run.returncode == 3, run.describe()  # the zero-page file still fails
    report = run.json()
    assert report["indexed"] == 1
    assert report["skipped"] == CORPUS_INDEXABLE
    assert [Path(f["path"]) for f in report["failed"]] == [ZERO_PAGES]
    clear_chroma_cache()
    with DocPCIndex(runs.stores["password"]) as index:
        assert len(index) == CORPUS_INDEXABLE + 1
        [doc] = index.get([document_id(ENCRYPTED)])
        assert doc.source == str(ENCRYPTED)


# --------------------------------------------------------------------------- docpc search


def test_search_with_few_candidates_returns_exact_scores(runs: Runs) -> None:
    """--candidates 5 on the 29-document store: the first stage keeps a few, and what comes back is still scored exactly."""
    run = runs["search_candidates"]
    assert run.returncode == 0, run.describe()
    results = run.json()
    exact = {r["id"]: r["score"] for r in runs["search"].json()}  # top-k 100: every document, scored exactly
    assert len(results) == 3
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    for r in results:
        assert r["score"] == pytest.approx(exact[r["id"]], rel=1e-6)


def test_search_json_is_a_ranked_list_of_documents(
    runs: Runs, corpus_store: CorpusStore, default_encoder: ColPaliEncoder
) -> None:
    run = runs["search"]
    assert run.returncode == 0, run.describe()
    results = run.json()
    assert isinstance(results, list)
    assert len(results) == CORPUS_INDEXABLE
    for r in results:
        assert set(r) >= RESULT_KEYS, r
        assert isinstance(r["score"], float)
        assert isinstance(r["total_pages"], int) and r["total_pages"] >= 1
        assert r["selected_pages"] and all(1 <= p <= r["total_pages"] for p in r["selected_pages"])
        assert Path(r["source"]).is_relative_to(CORPUS)
        assert r["metadata"] == {}  # the corpus store has no keys of the user's
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert len({r["id"] for r in results}) == len(results)
    # The same ranking as the Python API on the same store and model (with the same defaults as the command).
    with DocPCIndex(corpus_store.path, encoder=default_encoder) as index:
        expected = {r.id: r for r in index.search("anything", top_k=100)}
    assert {r["id"] for r in results} == set(expected)
    for r in results:
        e = expected[r["id"]]
        assert r["score"] == pytest.approx(e.score, abs=1e-3)
        assert (r["source"], r["title"], r["total_pages"], r["selected_pages"]) == (
            e.source, e.title, e.total_pages, e.selected_pages,
        )
    geotopo = next(r for r in results if r["source"] == str(GEOTOPO))
    assert (geotopo["total_pages"], geotopo["selected_pages"], geotopo["title"]) == (117, [1, 2, 3, 4], "Geometrie und Topologie")


def test_several_queries_print_one_json_line_each_ranked_as_alone(runs: Runs, corpus_store: CorpusStore,
                                                                   default_encoder: ColPaliEncoder) -> None:
    """Queries given together, or one per line of --queries (blank lines skipped): one model load, and each query's
    results are those it gets searched alone (the same ids, order and scores as the Python API)."""
    import torch

    with DocPCIndex(corpus_store.path, encoder=default_encoder) as index:
        alone = {q: index.search(q, top_k=3) for q in ("anything", "geometry")}
    # A query encoded beside another is padded to the longer one; in bfloat16 (the default on CPUs with native
    # bfloat16) that moves its vectors by bfloat16's rounding (about 1e-3 of a score), in float32 by far less.
    close = {"rel": 5e-3} if default_encoder.dtype == torch.bfloat16 else {"abs": 1e-3}
    for name in ("search_many", "search_file"):
        run = runs[name]
        assert run.returncode == 0, run.describe()
        lines = [json.loads(line) for line in run.stdout.splitlines()]
        assert [(d["n"], d["query"]) for d in lines] == [(1, "anything"), (2, "geometry")], run.describe()
        for d in lines:
            expected = alone[d["query"]]
            assert [r["id"] for r in d["results"]] == [r.id for r in expected], name
            assert [r["rank"] for r in d["results"]] == [1, 2, 3]
            for got, want in zip(d["results"], expected):
                assert got["score"] == pytest.approx(want.score, **close)
                assert set(got) >= RESULT_KEYS
    # One query keeps the plain list (the format follows the arguments): the first query's list is the same.
    assert [r["id"] for r in runs["search"].json()[:3]] == [r.id for r in alone["anything"]]


def test_queries_file_text_output_heads_each_block_with_its_query(runs: Runs) -> None:
    run = runs["search_file_text"]
    assert run.returncode == 0, run.describe()
    blocks = run.stdout.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["query 1: anything", "query 2: geometry"], run.describe()
    for block in blocks:
        assert [m[1] for line in block.splitlines() if (m := re.match(r"\s*(\d+)\.\s", line))] == ["1", "2"], block


def test_a_query_on_standard_input_is_answered_before_the_next_arrives(corpus_store: CorpusStore) -> None:
    """A program that writes a query and waits for its answer gets it (no waiting for a batch to fill), then the
    next; closing standard input ends the command cleanly."""
    proc = subprocess.Popen(
        docpc_command() + ["search", "--queries", "-", "--store", str(corpus_store.path), "-k", "2", "--json"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None

    def answer(query: str) -> dict:
        proc.stdin.write(query + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 180)
        assert ready, f"no answer to {query!r} while the command waited for more input"
        return json.loads(proc.stdout.readline())

    try:
        first = answer("anything")
        second = answer("geometry")
        proc.stdin.close()
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (first["n"], first["query"], len(first["results"])) == (1, "anything", 2)
    assert (second["n"], second["query"], len(second["results"])) == (2, "geometry", 2)
    assert proc.stdout.read() == ""  # nothing more than the two answers


def test_standard_input_with_only_blank_lines_says_so(corpus_store: CorpusStore) -> None:
    """Like an empty query: a usage error (2) in one line, and where the command's usage is."""
    blank = run_docpc("search", "--queries", "-", "--store", corpus_store.path, stdin="\n  \n")
    assert blank.returncode == 2 and blank.stdout == "", blank.describe()
    assert "held no query" in blank.stderr and "see 'docpc search --help'" in blank.stderr


def test_search_under_a_folder_and_a_file_finds_only_their_documents(runs: Runs) -> None:
    run = runs["search_under"]
    assert run.returncode == 0, run.describe()
    sources = {hit["source"] for hit in json.loads(run.stdout)}
    assert sources == {str(GEOTOPO.resolve()), str(MINIMAL.resolve())}


def test_show_without_out_or_png_writes_the_default_report_in_the_current_folder(runs: Runs) -> None:
    run = runs["show_default_report"]
    assert run.returncode == 0, run.describe()
    report = runs.work / "docpc-report.html"
    assert "docpc-report.html" in run.stdout and report.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(("argv", "hint"), [
    (["search", "q", "--store", "S", "--topk", "3"], "did you mean --top-k for --topk?"),
    (["search", "q", "--store", "S", "--top_k=3"], "did you mean --top-k for --top_k?"),
    (["list", "--store", "S", "--bogus"], None),
    (["search", " ", "--store", "S"], None),
])
def test_usage_errors_are_one_line_pointing_at_the_commands_help_and_the_nearest_option(
    argv: list[str], hint: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error, then where the usage is: not the whole usage first, which buried the one line that matters."""
    from docpc_retrievers.cli import main

    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.startswith(f"docpc {argv[0]}: error: ")
    assert err.splitlines()[1:] == [f"(see 'docpc {argv[0]} --help')"] and "usage:" not in err
    assert (hint in err) if hint else "did you mean" not in err


def test_search_top_k_0_answers_nothing_as_every_front_end_does(runs: Runs) -> None:
    """One rule for ``top_k`` (the option schema's ``ge=0``): the command line, HTTP, MCP and Python agree."""
    zero = runs["search_top0"]
    assert zero.returncode == 0, zero.describe()
    assert zero.json() == []


# --------------------------------------------------------------------------- docpc delete / info


def test_delete_by_id_removes_it_from_results_and_info(runs: Runs, tiny_encoder: ColPaliEncoder) -> None:
    gone = document_id(GEOTOPO)
    run = runs["delete_id"]
    assert run.returncode == 0, run.describe()
    assert run.json() == {"deleted": 1, "ids": [gone]}
    assert gone in {r["id"] for r in runs["search"].json()}
    clear_chroma_cache()
    with DocPCIndex(runs.stores["delete_id"], encoder=tiny_encoder) as index:
        ids = [r.id for r in index.search("anything", top_k=100)]
        assert index.get([gone]) == []
    assert len(ids) == CORPUS_INDEXABLE - 1
    assert gone not in ids
    info = runs["info_after_delete"]
    assert info.returncode == 0, info.describe()
    assert info.json()["documents"] == runs["info"].json()["documents"] - 1 == CORPUS_INDEXABLE - 1
    assert info.json()["vectors"] < runs["info"].json()["vectors"]


def test_delete_by_source_path(runs: Runs) -> None:
    run = runs["delete_path"]
    assert run.returncode == 0, run.describe()
    assert run.json() == {"deleted": 1, "ids": [document_id(MINIMAL)]}
    info = runs["info_after_delete_path"]
    assert info.returncode == 0, info.describe()
    assert info.json()["documents"] == CORPUS_INDEXABLE - 1
    clear_chroma_cache()
    with DocPCIndex(runs.stores["delete_path"]) as index:
        assert index.get([document_id(MINIMAL)]) == []
        assert str(MINIMAL) not in {d.source for d in index.get(index.store.ids())}
    again = runs["delete_path_again"]
    _assert_clean_error(again, 1)
    assert "no stored document matches" in again.stderr


def test_info_json_fields(runs: Runs, corpus_store: CorpusStore, tiny_checkpoint: Path) -> None:
    run = runs["info"]
    assert run.returncode == 0, run.describe()
    info = run.json()
    assert set(info) >= {"documents", "vectors", "bytes_on_disk", "model", "strategy", "grid"}
    assert info["documents"] == CORPUS_INDEXABLE
    assert info["model"] == str(tiny_checkpoint.resolve())
    assert info["strategy"] == "first"
    assert info["grid"] == "2x2"
    assert info["pages"] == 4
    with DocPCIndex(corpus_store.path) as index:
        assert info["vectors"] == sum(d.n_vectors for d in index.store.get())
    assert info["vectors"] > info["documents"]
    assert info["bytes_on_disk"] >= 2 * info["vectors"] * info["dim"]  # at least the fp16 vectors


def test_warm_fills_an_empty_cache_once(corpus_store: CorpusStore, tmp_path: Path) -> None:
    """`docpc warm` on a machine without the cache: every document fetched from Chroma, then nothing left to fetch."""
    import shutil

    store = copy_store(corpus_store.path, tmp_path / "S")
    shutil.rmtree(store / "cache")
    first = run_docpc("warm", "--store", store, "--json")
    assert first.returncode == 0, first.describe()
    assert first.json()["documents"] == first.json()["fetched"] == CORPUS_INDEXABLE
    again = run_docpc("warm", "--store", store)
    assert again.returncode == 0, again.describe()
    assert f"warmed {CORPUS_INDEXABLE} document(s): fetched 0 from Chroma" in again.stdout
    missing = run_docpc("warm", "--store", tmp_path / "nothing-here")
    assert missing.returncode == 1 and "no docpc store" in missing.stderr


# --------------------------------------------------------------------------- fatal errors (exit 1)


def test_search_on_a_directory_that_is_not_a_store_exits_1(runs: Runs) -> None:
    for name in ("not_a_store", "info_not_a_store"):
        run = runs[name]
        _assert_clean_error(run, 1)
        assert "no docpc store" in run.stderr
        assert str(runs.not_a_store) in run.stderr
    assert sorted(p.name for p in runs.not_a_store.iterdir()) == ["unrelated.txt"]  # nothing created there


def test_model_that_does_not_exist_exits_1_naming_it(runs: Runs) -> None:
    for name in ("missing_model_search", "missing_model_index"):
        run = runs[name]
        _assert_clean_error(run, 1)
        assert str(runs.missing_model) in run.stderr


def test_search_with_a_different_model_than_the_store_exits_1(runs: Runs, other_checkpoint: Path) -> None:
    run = runs["other_model_search"]
    _assert_clean_error(run, 1)
    assert "model" in run.stderr.lower()
    assert str(other_checkpoint.resolve()) in run.stderr
    assert run.stdout.strip() == ""


def test_index_with_a_different_strategy_exits_1(runs: Runs) -> None:
    run = runs["strategy_change"]
    _assert_clean_error(run, 1)
    assert "strategy" in run.stderr
    assert _count(runs.stores["strategy_change"]) == CORPUS_INDEXABLE


def test_pool_factor_and_no_grids_are_recorded_and_shown_by_info(runs: Runs, corpus_store: CorpusStore) -> None:
    made = runs["pool3_nogrids"]
    assert made.returncode == 0, made.describe()
    assert made.json()["indexed"] == 1
    info = runs["info_pool3"].json()
    assert info["pool_factor"] == 3 and info["grid_previews"] is False
    assert info["bytes_grid_images"] == 0
    text = runs["info_pool3_text"]
    assert text.returncode == 0, text.describe()
    assert "pool factor 3" in text.stdout and "no grid previews" in text.stdout
    main = runs["info"].json()  # the default store: every vector kept (factor 1, quality first), previews kept
    assert main["pool_factor"] == 1 and main["grid_previews"] is True and main["bytes_grid_images"] > 0
    with DocPCIndex(runs.work / "pool3") as index:
        assert index.settings.pool_factor == 3 and not index.settings.grid_previews
        assert not index.grids.store_grids


def test_pool_factor_or_no_grids_on_a_store_built_otherwise_exits_1_naming_them(runs: Runs) -> None:
    run = runs["pool_change"]
    _assert_clean_error(run, 1)
    assert "pool_factor" in run.stderr and "grid_previews" in run.stderr
    assert _count(runs.stores["pool_change"]) == CORPUS_INDEXABLE


# --------------------------------------------------------------------------- usage errors (exit 2)


USAGE_ERRORS = {
    "unknown strategy": ["index", "<pdf>", "--store", "<store>", "--strategy", "bogus"],
    "index without --store": ["index", "<pdf>"],
    "search without --store": ["search", "anything"],
    "info without --store": ["info"],
    "grid not ROWSxCOLS": ["index", "<pdf>", "--store", "<store>", "--grid", "2by2"],
    "grid with a zero": ["index", "<pdf>", "--store", "<store>", "--grid", "0x3"],
    "grid smaller than the default K=4": ["index", "<pdf>", "--store", "<store>", "--grid", "1x1"],
    "grid smaller than --pages": ["index", "<pdf>", "--store", "<store>", "--pages", "9", "--grid", "2x2"],
    "pages 0": ["index", "<pdf>", "--store", "<store>", "--pages", "0"],
    "negative top-k": ["search", "anything", "--store", "<store>", "--top-k", "-1"],
    "empty query": ["search", "  ", "--store", "<store>"],
    "no query": ["search", "--store", "<store>"],
    "queries file missing": ["search", "--queries", "<pdf>.missing", "--store", "<store>"],
    "where not JSON": ["search", "anything", "--store", "<store>", "--where", "{nope"],
    "candidates 0": ["search", "anything", "--store", "<store>", "--candidates", "0"],
    "no command": [],
}


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_usage_errors_exit_2(case: str, tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "doc.pdf", "usage")
    store = tmp_path / "S"
    args = [a.replace("<pdf>", str(pdf)).replace("<store>", str(store)) for a in USAGE_ERRORS[case]]
    run = run_docpc(*args, timeout=120)
    _assert_clean_error(run, 2)
    assert "error: " in run.stderr and "--help')" in run.stderr and "usage:" not in run.stderr
    assert not store.exists()  # refused before anything was created


# --------------------------------------------------------------------------- kill and re-run


def test_killed_index_run_keeps_commits_and_rerun_completes_without_duplicates(
    tmp_path: Path, tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder
) -> None:
    files = [make_pdf(tmp_path / "pdfs" / f"doc{i:02d}.pdf", f"kill test document {i}", 1 + i % 3) for i in range(12)]
    expected = sorted(document_id(f) for f in files)
    assert len(set(expected)) == len(files)
    store = tmp_path / "S"
    args = ["index", tmp_path / "pdfs", "--store", store, "--model", tiny_checkpoint, "--commit-every", "1", "--workers", "2"]
    args += ["--json", "-v"]

    argv = docpc_command() + [os.fspath(a) for a in args]
    log = tmp_path / "killed.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, env=subprocess_env(), stdout=fh, stderr=subprocess.STDOUT)
    try:
        # With --commit-every 1 and -v, the indexer logs "committed" after each commit.
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if log.read_text(errors="replace").count("committed") >= 2:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"indexing ended before it could be killed:\n{log.read_text()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    # The killed run left no lock behind, and the store opens with what was committed. (Opened in
    # a subprocess: a store damaged by the kill could crash the process that opens it.)
    lock = WriterLock(Path(store) / "write.lock")
    lock.acquire()
    lock.release()
    info = run_docpc("info", "--store", store, "--json")
    assert info.returncode == 0, info.describe()
    committed = info.json()["documents"]
    assert 1 <= committed < len(files), info.describe()

    rerun = run_docpc(*args)
    assert rerun.returncode == 0, rerun.describe()
    report = rerun.json()
    assert report["failed"] == []
    assert report["skipped"] == committed
    assert report["indexed"] + committed == len(files)

    clear_chroma_cache()
    final = copy_store(store, tmp_path / "final")
    with DocPCIndex(final, encoder=tiny_encoder) as index:
        assert len(index) == len(files)
        assert sorted(index.store.ids()) == expected
        docs = index.get(index.store.ids())
        assert sorted(d.source for d in docs) == sorted(str(f.resolve()) for f in files)
        assert sorted(r.id for r in index.search("anything", top_k=100)) == expected


# --------------------------------------------------------------------------- second writer

_HOLDER = textwrap.dedent(
    """
    import pathlib, sys, time
    from docpc_retrievers.index import DocPCIndex

    index = DocPCIndex(sys.argv[1], writable=True)
    pathlib.Path(sys.argv[2]).write_text("ready")
    time.sleep(600)
    """
)


def test_second_writer_gets_a_clear_error_and_the_store_stays_intact(
    corpus_store: CorpusStore, tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder, tmp_path: Path
) -> None:
    store = copy_store(corpus_store.path, tmp_path / "S")
    new_pdf = make_pdf(tmp_path / "new" / "second-writer.pdf", "written while locked")
    ready = tmp_path / "holder-ready"
    holder_log = tmp_path / "holder.log"
    with holder_log.open("wb") as fh:
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, os.fspath(store), os.fspath(ready)],
            env=subprocess_env(), stdout=fh, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), f"the holder process did not open the store:\n{holder_log.read_text()}"
        results = run_docpc_parallel(
            {
                "index": ("index", new_pdf, "--store", store, "--model", tiny_checkpoint, "--json"),
                "delete": ("delete", document_id(GEOTOPO), "--store", store),
            },
            tmp_path / "logs",
        )
        assert holder.poll() is None, "the holder died before the second writer ran"
    finally:
        holder.kill()
        holder.wait()
    for run in results.values():
        _assert_clean_error(run, 1)
        assert "being written by" in run.stderr
        assert f"pid {holder.pid}" in run.stderr
        assert run.stdout.strip() == ""

    with DocPCIndex(store, encoder=tiny_encoder) as index:
        assert len(index) == CORPUS_INDEXABLE
        ids = {r.id for r in index.search("anything", top_k=100)}
        assert len(ids) == CORPUS_INDEXABLE
        assert document_id(GEOTOPO) in ids
        assert document_id(new_pdf) not in ids
    with DocPCIndex(store, writable=True) as index:  # the holder's death released the lock
        assert len(index) == CORPUS_INDEXABLE


def test_inconsistent_store_gives_one_line_not_a_traceback(corpus_store: CorpusStore, tmp_path: Path) -> None:
    """A store whose database file was overwritten: search fails with one line and exit 1; -v adds the traceback."""
    store = copy_store(corpus_store.path, tmp_path / "broken")
    (store / "chroma" / "chroma.sqlite3").write_bytes(b"this is not a database" * 100)
    run = run_docpc("search", "annual report", "--store", store)
    assert run.returncode == 1, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    lines = [line for line in run.stderr.splitlines() if line.startswith("docpc:")]
    assert len(lines) == 1 and "run with -v for details" in lines[0], run.describe()
    verbose = run_docpc("search", "annual report", "--store", store, "-v")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr, verbose.describe()


def test_eval_without_the_extra_names_it(tmp_path: Path) -> None:
    """With rank-bm25 hidden (as on a core-only install) `docpc eval` says which extra to install."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "rank_bm25.py").write_text("raise ImportError('hidden for this test')\n")
    env = subprocess_env(PYTHONPATH=str(blocker))
    run = run_docpc("eval", str(tmp_path), "--systems", "bm25:all", env=env)
    assert run.returncode == 1, run.describe()
    assert "docpc-retrievers[eval]" in run.stderr and "Traceback" not in run.stderr, run.describe()


# ----------------------------------------------------------------------------- docpc show

SHOW_QUERY = "topology and geometry of surfaces"


@dataclass
class ShowRun:
    report: Path
    run: Run
    seconds: float


@pytest.fixture(scope="module")
def show_run(corpus_store: CorpusStore, tmp_path_factory: pytest.TempPathFactory) -> ShowRun:
    report = tmp_path_factory.mktemp("show") / "report.html"
    started = time.monotonic()
    run = run_docpc("show", SHOW_QUERY, "--store", corpus_store.path, "--top-k", "5", "--out", report, "--json")
    return ShowRun(report, run, time.monotonic() - started)


def test_show_writes_one_self_contained_report(show_run: ShowRun) -> None:
    assert show_run.run.returncode == 0, show_run.run.describe()
    hits = show_run.run.json()["hits"]
    assert len(hits) == 5 and show_run.run.json()["written"] == [str(show_run.report)]
    page = show_run.report.read_text(encoding="utf-8")
    assert page.count('<section class="hit"') == 5
    assert '<span id="hit-count">5</span>' in page
    for hit in hits:
        assert f'data-doc="{hit["id"]}"' in page
    assert "<script" not in page.lower()
    assert "http://" not in page and "https://" not in page  # nothing to fetch: every image is a data URI
    assert page.count('src="data:image/') >= 5


#: Where a Chromium or Chrome may be besides the PATH (macOS installs it as an app).
_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome",
             "/Applications/Chromium.app/Contents/MacOS/Chromium",
             "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome")


def _chromium() -> tuple[str | None, str | None]:
    """A Chromium or Chrome and a ChromeDriver found on this machine (None for what is missing)."""
    import shutil

    browser = next((found for name in _BROWSERS if (found := shutil.which(name))), None)
    return browser, shutil.which("chromedriver")


def test_show_report_loads_in_headless_chromium_with_every_image_decoded(show_run: ShowRun, tmp_path: Path) -> None:
    browser, driver_path = _chromium()
    if browser is None or driver_path is None:
        missing = " and ".join(n for n, f in (("Chromium or Chrome", browser), ("ChromeDriver", driver_path)) if not f)
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} missing: scripts/setup.sh installs them where it can (apt-get)")
        pytest.skip(f"{missing} not found on this machine (install them to run the report in a real browser; "
                    "nothing is downloaded at test time)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1100,1400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)  # local driver: nothing is downloaded
    try:
        driver.get(show_run.report.resolve().as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);"
        )
        sections = driver.execute_script("return document.querySelectorAll('section.hit').length;")
        count = driver.execute_script("return document.getElementById('hit-count').textContent;")
        assert driver.save_screenshot(str(tmp_path / "report.png"))
    finally:
        driver.quit()
    expected = show_run.report.read_text(encoding="utf-8").count("<img")
    assert len(images) == expected >= 5
    assert all(complete and width > 0 and height > 0 for complete, width, height in images), images
    assert sections == 5 and count == "5"


def test_show_png_writes_each_hits_pictures(corpus_store: CorpusStore, tmp_path: Path) -> None:
    from PIL import Image

    run = run_docpc("show", SHOW_QUERY, "--store", corpus_store.path, "--top-k", "2", "--png", tmp_path / "png", "--json")
    assert run.returncode == 0, run.describe()
    written = [Path(p) for p in run.json()["written"]]
    assert [p.name.split("-")[0] for p in written if p.name.endswith("overlay.png")] == ["01", "02"]
    for path in written:
        assert path.parent == tmp_path / "png"
        with Image.open(path) as img:
            assert img.width > 0


def test_show_takes_one_output_at_most(corpus_store: CorpusStore, tmp_path: Path) -> None:
    run = run_docpc("show", SHOW_QUERY, "--store", corpus_store.path, "--out", tmp_path / "a.html", "--png", tmp_path)
    assert run.returncode == 2 and "not allowed with argument" in run.stderr


def test_info_and_list_answer_without_importing_torch_or_pymupdf(corpus_store: CorpusStore) -> None:
    """Printing a manifest or a listing loads no model stack and no PDF library (each takes about a second)."""
    code = ("import sys; from docpc_retrievers.cli import main; rc = main(sys.argv[1:]); "
            "print(sorted(m for m in ('torch', 'transformers', 'pymupdf') if m in sys.modules)); sys.exit(rc)")
    for command in ("info", "list"):
        proc = subprocess.run([sys.executable, "-c", code, command, "--store", str(corpus_store.path)],
                              capture_output=True, text=True, env=subprocess_env(), timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == "[]", (command, proc.stdout[-300:])


def test_off_a_terminal_progress_is_plain_lines_with_totals_and_the_model_load_is_announced(
    corpus_store: CorpusStore,
) -> None:
    err = corpus_store.run.stderr
    assert "docpc: loading the model" in err
    assert f"docpc: rendered {CORPUS_PDF_COUNT} of {CORPUS_PDF_COUNT}" in err  # the two failures were tried
    assert f"docpc: committed {CORPUS_INDEXABLE} of {CORPUS_INDEXABLE}" in err  # and had nothing to commit
    assert "\r" not in err  # no bar redrawn in a log


def test_a_line_bar_writes_at_most_every_few_seconds_and_once_at_the_end(caplog: pytest.LogCaptureFixture) -> None:
    from docpc_retrievers.progress import progress_bar

    with caplog.at_level(logging.INFO, logger="docpc_retrievers.progress"):
        bar = progress_bar(500, True, "rendered", every=3600)
        for _ in range(500):
            bar.update(1)
        bar.close()
        progress_bar(5, False, "nothing").close()
    assert [r.getMessage() for r in caplog.records] == ["rendered 500 of 500"]
