"""What a newcomer met (each a mistake that must say what to do): a missing extra named before a model loads, a grid
shape given as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from docpc_retrievers.cli import serve as serve_cli
from docpc_retrievers.cli.app import main
from docpc_retrievers.config import IndexSettings
from docpc_retrievers.encoders import ColPaliEncoder


@pytest.mark.parametrize("command", [["serve"], ["mcp"]])
def test_serving_without_its_extra_says_so_before_a_model_loads(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(serve_cli, "SERVE_MODULES", ("docpc_no_such_module", "json"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(ColPaliEncoder, "__init__", refuse)
    with pytest.raises(SystemExit) as caught:
        main([*command, "--store", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert "[serve] extra (docpc_no_such_module not installed)" in err and "pip install" in err
    assert "Traceback" not in err and "ModuleNotFoundError" not in err


def test_a_grid_shape_as_text_is_read_or_refused_with_the_shape_it_wants() -> None:
    assert IndexSettings(pages=6, grid="2x3").grid == (2, 3)
    assert IndexSettings(pages=4, grid=(2, 2)).grid == (2, 2)
    for bad in ("3x", "2by2", "x", (2,), ("a", 2)):
        with pytest.raises(ValueError, match="grid must be ROWSxCOLS such as '2x2'"):
            IndexSettings(pages=4, grid=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot hold 5 pages"):
        IndexSettings(pages=5, grid="2x2")


@pytest.fixture()
def small_store(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> Path:
    from e2e_helpers import clear_chroma_cache, make_pdf

    from docpc_retrievers import DocPCIndex

    for i in range(2):
        make_pdf(tmp_path / "docs" / f"n{i}.pdf", f"newcomer document {i}", 1 + i)
    with DocPCIndex.from_pdfs([tmp_path / "docs"], tmp_path / "store", encoder=tiny_encoder, workers=0):
        pass
    clear_chroma_cache()
    return tmp_path / "store"


def test_show_never_replaces_an_earlier_default_report(
    small_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "docpc-report.html").write_text("an earlier report")
    assert main(["show", "newcomer", "--store", str(small_store), "-k", "1"]) == 0
    assert (work / "docpc-report.html").read_text() == "an earlier report"
    assert (work / "docpc-report-2.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "wrote docpc-report-2.html" in capsys.readouterr().out
    assert main(["show", "newcomer", "--store", str(small_store), "-k", "1", "--out", "docpc-report.html"]) == 0
    assert "replacing the report that was there" in capsys.readouterr().out  # asked for by name: replaced, and said


def test_the_missing_sources_line_agrees_in_number() -> None:
    from docpc_retrievers.results import IndexReport

    one = IndexReport(missing=["/gone/a.pdf"]).summary()
    assert "1 stored document under these folders has lost its source file: `docpc list --missing` shows it" in one
    two = IndexReport(missing=["/gone/a.pdf", "/gone/b.pdf"]).summary()
    assert "2 stored documents under these folders have lost their source files" in two and "deletes them" in two


def test_a_progress_line_is_never_said_twice(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Off a terminal, a bar whose last update already printed its line (the first update after a slow start) does
    not print the same line again when it closes."""
    from docpc_retrievers import progress

    clock = iter([0.0, 10.0, 10.1, 10.2, 10.3])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = progress._LineBar(2, "committed", every=5.0)
    with caplog.at_level("INFO", logger="docpc_retrievers.progress"):
        bar.update(2)  # 10 s after the start: says "committed 2 of 2"
        bar.close()
    assert [r.getMessage() for r in caplog.records] == ["committed 2 of 2"]


def test_colpali_engines_fastplaid_notice_is_dropped_and_other_info_kept(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from docpc_retrievers.cli.app import _setup_logging

    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_NO_ADVISORY_WARNINGS"):  # set by the CLI: restored
        monkeypatch.setenv(name, "1")
    _setup_logging(1)  # -v: INFO shown
    logging.info("FastPlaid is not installed.If you want to use it:Instal with `pip install ...`")
    logging.getLogger("docpc_retrievers.test").info("an info line of our own")
    err = capsys.readouterr().err
    assert "FastPlaid" not in err and "an info line of our own" in err


def test_opening_a_local_checkpoint_draws_no_loading_bar(tiny_checkpoint: Path) -> None:
    import subprocess
    import sys

    code = ("from docpc_retrievers.encoders import ColPaliEncoder\n"
            f"ColPaliEncoder({str(tiny_checkpoint)!r}, device='cpu', dtype='float32')\n"
            "import transformers.utils.logging as hf\nprint(hf.is_progress_bar_enabled())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                         env={**env, "HF_HUB_OFFLINE": "1"})
    assert "Loading weights" not in run.stderr and run.stdout.strip() == "True"  # bars back on for later downloads


def test_a_hits_shares_are_told_one_way_everywhere(small_store: Path, tiny_encoder: ColPaliEncoder) -> None:
    """The search result, its JSON, explain().shares and explain().breakdown() give the same numbers for the same
    hit, and they add up to 1: the query's prompt tokens are their own part, never counted into a page."""
    from docpc_retrievers import DocPCIndex
    from docpc_retrievers.cli.search import evidence_line

    with DocPCIndex(small_store, encoder=tiny_encoder) as index:
        for hit in index.search("newcomer document", top_k=2):
            pages = {e.page: e.share or 0.0 for e in hit.evidence_pages}
            assert abs(sum(pages.values()) + sum(hit.other_shares.values()) - 1.0) < 1e-6
            assert hit.other_shares.get("query prompt tokens", 0.0) > 0  # the tiny model's query prompt is scored
            data = hit.to_dict()
            assert {e["page"]: e["share"] for e in data["evidence_pages"]} == pytest.approx(pages, abs=1e-6)
            assert data["other_shares"] == pytest.approx(hit.other_shares, abs=1e-6)
            why = hit.explain()
            assert {p: v for p, v in why.shares.items() if v > 0} == pytest.approx(
                {p: v for p, v in pages.items() if v > 0}, abs=1e-4)
            expected = {**{f"page {p}": v for p, v in pages.items() if v > 0}, **hit.other_shares}
            assert why.breakdown() == pytest.approx(expected, abs=1e-4)
            assert abs(sum(why.breakdown().values()) - 1.0) < 1e-6
            line = evidence_line(hit.evidence_pages, hit.other_shares)
            assert all(f"{name} {value:.0%}" in line for name, value in expected.items() if value >= 0.005)


def test_a_server_without_full_paths_names_the_model_by_its_folder_everywhere(
    small_store: Path, tiny_encoder: ColPaliEncoder
) -> None:
    from docpc_retrievers import DocPCIndex
    from docpc_retrievers.serve.service import StoreService

    service = StoreService(DocPCIndex(small_store, encoder=tiny_encoder))
    try:
        health, status = service.health()
        info = service.info()
        doc_id = next(iter(service.index.documents())).id
        one = service.document(doc_id)
        assert status == 200 and health["model"] == info["model"] == one["model"]
        assert "/" not in health["model"] and health["model"] == Path(tiny_encoder.model_id).name
        assert isinstance(one["layout"], dict) and isinstance(one["token_grid"], dict)
    finally:
        service.close()


def test_a_first_run_where_every_file_fails_leaves_no_store(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No store that records no model (the next run would look for the hub default); an existing store stays."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    store = tmp_path / "store"
    assert main(["index", str(tmp_path / "bad"), "--store", str(store), "--model", str(tiny_checkpoint),
                 "--workers", "0", "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "failed" in err and "no store was created" in err and not store.exists()
    from e2e_helpers import make_pdf

    make_pdf(tmp_path / "good" / "ok.pdf", "a good one", 1)
    assert main(["index", str(tmp_path / "good"), "--store", str(store), "--model", str(tiny_checkpoint),
                 "--workers", "0", "--no-progress"]) == 0
    assert main(["index", str(tmp_path / "bad"), "--store", str(store), "--workers", "0", "--no-progress"]) == 3
    assert store.exists() and "no store was created" not in capsys.readouterr().err
