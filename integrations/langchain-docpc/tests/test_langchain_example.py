"""examples/langchain_quickstart.py runs end to end (subprocess) on the corpus with the tiny checkpoint."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from docpc_retrievers import DocPCIndex
from docpc_retrievers.encoders import ColPaliEncoder
from langchain_docpc import DocPCRetriever

REPO_ROOT = Path(__file__).resolve().parents[3]

SCRIPT = REPO_ROOT / "examples" / "langchain_quickstart.py"
QUERIES = ("a table of results", "an arabic text")


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_quickstart_indexes_retrieves_and_answers(
    tmp_path: Path,
    pdf_folder: Path,
    tiny_checkpoint: Path,
    tiny_encoder: ColPaliEncoder,
    corpus_index: DocPCIndex,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = tmp_path / "store"
    query_args = [a for q in QUERIES for a in ("--query", q)]
    first = _run(
        pdf_folder, "--model", tiny_checkpoint, "--store", store, "-k", "2", *query_args, "--mock-llm", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert f"added {len(corpus_index)}, replaced 0, moved 0, removed 0, unchanged 0" in out
    ids = re.findall(r"id=([0-9a-f]{32})", out)
    assert len(ids) == 2 * len(QUERIES)
    assert out.count("Answer (text)") == len(QUERIES) and out.count("Answer (images)") == len(QUERIES)
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder, k=2) as retriever:
        expected = [d.id for q in QUERIES for d in retriever.invoke(q)]
    assert ids == expected

    # Second run in-process (the script's main()): the store is reused and, without --mock-llm, no LLM runs.
    module = _load_script()
    quiet_logger = logging.getLogger("docpc_retrievers.index")
    level = quiet_logger.level
    try:
        # no --model: the store's recorded model (here the tiny checkpoint, not the hub default) is used
        argv = [str(pdf_folder), "--store", str(store), "--query", QUERIES[0]]
        assert module.run(argv) == 0
    finally:
        quiet_logger.setLevel(level)
    again = capsys.readouterr().out
    assert f"added 0, replaced 0, moved 0, removed 0, unchanged {len(corpus_index)}" in again
    assert "No chat model configured: retrieval only" in again
    assert "Answer" not in again
    again_ids = re.findall(r"id=([0-9a-f]{32})", again)
    assert len(again_ids) == 3 and again_ids[:2] == ids[:2], "top 3 of the first query extends its top 2"


def test_quickstart_with_another_model_than_the_store_says_so(
    tmp_path: Path, pdf_folder: Path, tiny_checkpoint: Path, corpus_index: DocPCIndex
) -> None:
    from docpc_retrievers.testing import build_tiny_colqwen2

    other = build_tiny_colqwen2(tmp_path / "other", seed=1)
    store = tmp_path / "store"
    assert _run(pdf_folder, "--model", tiny_checkpoint, "--store", store, "--query", QUERIES[0], cwd=tmp_path).returncode == 0
    wrong = _run(pdf_folder, "--model", other, "--store", store, "--query", QUERIES[0], cwd=tmp_path)
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert "error: store" in wrong.stderr and "fingerprint" in wrong.stderr


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("langchain_quickstart", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_help_names_the_real_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load_script()
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "vidore/colqwen2-v1.0" in out and "--store" in out and "--mock-llm" in out
