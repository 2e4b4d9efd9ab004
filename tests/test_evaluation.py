"""Evaluation harness: system specs, BM25 vs random on the tiny synthetic set, the report, and `docpc eval`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from docpc_retrievers.cli.app import main as docpc_main
from docpc_retrievers.eval import (
    EvaluationReport,
    IndexStats,
    SystemResult,
    SystemSpecError,
    expected_random_metric,
    parse_system,
    run_evaluation,
    tokenize,
)
from docpc_retrievers.eval.corpus import LabelledQuery, load_labelled_corpus
from docpc_retrievers.eval.metrics import evaluate_run
from docpc_retrievers.eval.synthetic import generate_corpus


@pytest.fixture(autouse=True)
def _fresh_chroma_systems() -> Iterator[None]:
    yield
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_corpus(tmp_path_factory.mktemp("eval") / "tiny", "tiny", seed=0).root


# ------------------------------------------------------------------------------------ specs


def test_parse_grid_bm25_random_specs() -> None:
    g = parse_system("grid:boundary:4")
    assert (g.kind, g.strategy, g.pages, g.grid, g.visual) == ("grid", "boundary", 4, None, True)
    assert parse_system("grid:uniform:6:2x3").grid == (2, 3)
    b = parse_system("bm25:selected:first:4")
    assert (b.kind, b.scope, b.strategy, b.pages, b.visual) == ("bm25", "selected", "first", 4, False)
    assert parse_system("bm25:all").index_key() == "bm25-all"
    assert parse_system("random:7").seed == 7
    assert parse_system("grid:first:4").slug == "grid-first-4"
    for bad, message in [
        ("grid:first", "expected grid"),
        ("grid:sideways:4", "unknown strategy"),
        ("grid:first:0", "positive integer"),
        ("grid:first:5:2x2", "cannot hold"),
        ("grid:first:4:2by2", "grid shape"),
        ("bm25:some", "expected bm25"),
        ("colbert", "unknown system"),
        ("random:x", "expected random"),
    ]:
        with pytest.raises(SystemSpecError, match=message):
            parse_system(bad)


def test_page_and_rerank_specs() -> None:
    with pytest.raises(SystemSpecError, match="expected page"):
        parse_system("page:first")
    p = parse_system("page:first:4:mean")
    assert (p.kind, p.strategy, p.pages, p.aggregate) == ("page", "first", 4, "mean")
    assert parse_system("page:all").pages is None and parse_system("page:all:sum").aggregate == "sum"
    r = parse_system("rerank:first:4:10")
    assert (r.kind, r.top_n, r.index_key()) == ("rerank", 10, parse_system("grid:first:4").index_key())


def test_tokenize() -> None:
    assert tokenize("What is the Liquidity-risk for 2 banks?") == ["liquidity", "risk", "2", "banks"]


# ------------------------------------------------------------------------------------ report


def _result(spec: str, run: dict[str, list[str]], qrels: dict[str, dict[str, int]], **stats: float) -> SystemResult:
    scored = {q: {d: float(len(ds) - i) for i, d in enumerate(ds)} for q, ds in run.items()}
    return SystemResult(parse_system(spec), IndexStats(**stats), scored, evaluate_run(qrels, scored))  # type: ignore[arg-type]


def test_report_tables_and_breakdown() -> None:
    queries = [
        LabelledQuery("q1", "a", {"d1": 1}, "finance"),
        LabelledQuery("q2", "b", {"d2": 2, "d3": 1}, "finance"),
        LabelledQuery("q3", "c", {"d4": 1}, "legal"),
        LabelledQuery("q4", "d", {"d5": 1}, None),
    ]
    qrels = {q.query_id: q.relevance for q in queries}
    far = [f"x{i}" for i in range(5)]
    a = _result("bm25:all", {"q1": ["d1"], "q2": ["d3"], "q3": [*far, "d4"]}, qrels, images_encoded=0, total_index_s=2.0)
    b = _result("grid:first:4", {"q1": ["d1"], "q3": ["d4"], "q4": far}, qrels, images_encoded=10, total_index_s=1.0)
    report = EvaluationReport("set", "test", "m", (5, 10), "ndcg", 5, queries, [a, b])
    assert report.domains() == ["finance", "legal", "other"]
    rows = {r["system"]: r for r in report.quality()}
    assert rows["grid:first:4"]["domains"] == {"finance": 0.5, "legal": 1.0, "other": 0.0}
    assert rows["grid:first:4"]["average"] == pytest.approx(0.5)
    assert rows["grid:first:4"]["all_queries"] == pytest.approx(0.5)  # q2 missing from the run counts as 0
    b_eff = {r["system"]: r for r in report.efficiency()}["grid:first:4"]
    assert b_eff["ratio"]["total_index_s"] == pytest.approx(0.5) and b_eff["ratio"]["images_encoded"] is None
    breakdown = report.breakdown()
    assert breakdown is not None
    assert breakdown["queries"] == {"both": ["q1"], "only_a": ["q2"], "only_b": ["q3"], "neither": ["q4"]}
    md = report.to_markdown()
    assert "| system | finance | legal | other | average |" in md
    assert "| only B | 1 |" in md and "Relative to `bm25:all`" in md


# ------------------------------------------------------------------------------------ runs


def test_bm25_is_far_above_random_on_tiny(tiny_set: Path, tmp_path: Path) -> None:
    corpus = load_labelled_corpus(tiny_set)
    report = run_evaluation(corpus, ["bm25:all", "random", "bm25:selected:first:4"], out_dir=tmp_path / "out")
    means = {r.spec.text: r.metrics.mean["ndcg@5"] for r in report.systems}
    random_expected = expected_random_metric(corpus.qrels(), sorted(corpus.documents), "ndcg", 5, trials=300)
    assert 0.05 < random_expected < 0.3
    assert means["bm25:all"] > 0.8
    assert means["bm25:all"] - random_expected > 0.5
    assert abs(means["random"] - random_expected) < 0.2  # the random system behaves like the shuffles
    # First-4-pages text misses evidence placed deeper in the documents.
    assert means["bm25:selected:first:4"] < means["bm25:all"] - 0.1
    bm25 = report.systems[0].stats
    assert bm25.documents == len(corpus.documents) and bm25.images_encoded == 0 and bm25.bytes_on_disk > 0
    again = run_evaluation(corpus, ["bm25:all"], out_dir=tmp_path / "out", write=False)
    assert again.systems[0].stats.reused and again.systems[0].run == report.systems[0].run


def test_identical_pdfs_share_scores(tmp_path: Path, tiny_set: Path) -> None:
    src = sorted((tiny_set / "pdfs" / "finance").glob("*.pdf"))
    (tmp_path / "pdfs").mkdir()
    shutil.copy(src[0], tmp_path / "pdfs" / "one.pdf")
    shutil.copy(src[0], tmp_path / "pdfs" / "one-copy.pdf")
    shutil.copy(src[1], tmp_path / "pdfs" / "two.pdf")
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"query_id": "q", "query": "annual report risk", "positives": ["one-copy"]}) + "\n"
    )
    report = run_evaluation(load_labelled_corpus(tmp_path), ["bm25:all"], out_dir=tmp_path / "out")
    run = report.systems[0].run["q"]
    assert set(run) == {"one", "one-copy", "two"}
    assert run["one"] == run["one-copy"]


def test_visual_systems_need_a_model(tiny_set: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemSpecError, match="need a model"):
        run_evaluation(load_labelled_corpus(tiny_set), ["grid:first:4"], out_dir=tmp_path)


# ------------------------------------------------------------------------------------ CLI


def test_cli_usage_errors_exit_2(tiny_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [
        (["--systems", "grid:first:4"], "need --model"),
        (["--systems", "bm25:everything"], "expected bm25"),
        (["--systems", "bm25:all", "bm25:all"], "listed twice"),
        (["--systems", "bm25:all", "--k", "0"], "cut-offs"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as info:
            docpc_main(["eval", str(tiny_set), "--out", str(tmp_path / "o"), *extra])
        assert info.value.code == 2, extra
        assert message in capsys.readouterr().err, extra
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_docpc_eval_bm25_and_grid_on_tiny(
    tiny_set: Path, tmp_path: Path, tiny_checkpoint: Path, default_encoder: object, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    code = docpc_main(
        ["eval", str(tiny_set), "--model", str(tiny_checkpoint), "--device", "cpu", "--systems", "bm25:all", "grid:first:4", "--out", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    md = (out / "report.md").read_text()
    assert printed.startswith(md)
    for section in ("## Quality (ndcg@5)", "## Efficiency", "Relative to `bm25:all`", "## Per-query outcomes: A = `bm25:all`, B = `grid:first:4`"):
        assert section in md
    assert "| system | biology | education | finance | government | industrial | legal | research | average |" in md
    data = json.loads((out / "report.json").read_text())
    n_queries = data["queries"]
    assert n_queries == len(load_labelled_corpus(tiny_set).queries)
    eff = {row["system"]: row for row in data["efficiency"]}
    n_docs = len(load_labelled_corpus(tiny_set).documents)
    assert eff["grid:first:4"]["images_encoded"] == n_docs  # one grid per document
    assert eff["grid:first:4"]["vectors_stored"] > n_docs
    assert eff["grid:first:4"]["bytes_on_disk"] > 0 and eff["grid:first:4"]["encode_s"] > 0 and eff["grid:first:4"]["insert_s"] > 0
    assert eff["grid:first:4"]["total_index_s"] >= eff["grid:first:4"]["encode_s"] + eff["grid:first:4"]["insert_s"]
    assert eff["grid:first:4"]["query_p50_ms"] > 0
    assert eff["bm25:all"]["images_encoded"] == 0 and eff["bm25:all"]["vectors_stored"] == 0
    counts = data["breakdown"]["counts"]
    assert sum(counts.values()) == n_queries and set(counts) == {"both", "only_a", "only_b", "neither"}
    quality = {row["system"]: row for row in data["quality"]}
    assert 0.0 <= quality["grid:first:4"]["average"] <= 1.0
    assert quality["bm25:all"]["average"] > 0.8
    trec = (out / "runs" / "grid-first-4.trec").read_text().splitlines()
    assert trec and all(len(line.split()) == 6 for line in trec)
    index_dirs = [p for p in (out / "indexes").iterdir() if p.is_dir() and p.name.startswith("grid-first-4--")]
    assert len(index_dirs) == 1

    # Same settings, same model with the command's defaults (already loaded): the index is reused and the results
    # are identical.
    corpus = load_labelled_corpus(tiny_set)
    again = run_evaluation(corpus, ["grid:first:4"], out_dir=out, encoder=default_encoder, write=False)
    stats = again.systems[0].stats
    assert stats.reused and stats.images_encoded == n_docs  # recorded at build time, nothing re-encoded
    grid_trec: dict[str, dict[str, float]] = {}
    for line in trec:
        qid, _, doc, _, score, _ = line.split()
        grid_trec.setdefault(qid, {})[doc] = float(score)
    rerun = again.systems[0].run
    assert set(rerun) == set(grid_trec)
    for qid, per in rerun.items():
        assert set(per) == set(grid_trec[qid])
        for doc, score in per.items():
            assert score == pytest.approx(grid_trec[qid][doc], abs=1e-5)


@pytest.mark.slow
def test_page_system_is_the_efficiency_reference(tiny_set: Path, tmp_path: Path, tiny_encoder: object) -> None:
    corpus = load_labelled_corpus(tiny_set)
    keep = sorted(corpus.documents)[:4]
    (tmp_path / "pdfs").mkdir()
    for doc_id in keep:
        shutil.copy(corpus.documents[doc_id], tmp_path / "pdfs" / f"{doc_id}.pdf")
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"query_id": "q", "query": "annual report", "positives": keep[:2], "domain": "x"}) + "\n"
    )
    small = load_labelled_corpus(tmp_path)
    report = run_evaluation(small, ["grid:first:2", "page:first:2:mean"], out_dir=tmp_path / "out", encoder=tiny_encoder)
    grid, page = (r.stats for r in report.systems)
    assert report.reference().spec.text == "page:first:2:mean"
    assert grid.images_encoded == 4 and page.images_encoded == 8  # one grid vs two pages per document
    eff = {row["system"]: row for row in report.efficiency()}
    assert eff["grid:first:2"]["ratio"]["images_encoded"] == pytest.approx(0.5)
    assert set(report.systems[1].run["q"]) == set(keep)
