"""examples/cli_quickstart.md: every ``docpc`` command in its shell block runs, in order, on the corpus.

The commands are read from the document itself (placeholders swapped for the
corpus, a tmp store and the tiny checkpoint), so the README text cannot rot.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from docpc_retrievers import DocPCIndex, cli
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.testing.support import CORPUS, needs_corpus

REPO_ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = REPO_ROOT / "examples" / "cli_quickstart.md"
DELETED = CORPUS / "001-trivial/minimal-document.pdf"


def _commands() -> list[list[str]]:
    text = QUICKSTART.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "the quickstart has one shell block"
    lines = [line.strip() for line in blocks[0].splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("docpc ")]


@needs_corpus
def test_every_quickstart_command_runs(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    commands = _commands()
    assert [c[1] for c in commands] == ["index", "search", "search", "info", "index", "delete"]
    swap = {
        "path/to/pdfs/old-report.pdf": str(DELETED),
        "path/to/pdfs": str(CORPUS),
        "./docpc-store": str(tmp_path / "docpc-store"),
    }
    outputs = []
    for argv in commands:
        args = [swap.get(a, a) for a in argv[1:]]
        if args[0] == "index":
            args += ["--model", str(tiny_checkpoint), "--no-progress"]
        code = cli.main(args)
        out = capsys.readouterr().out
        outputs.append(out)
        # The corpus holds an encrypted and a zero-page PDF: index reports them and exits 3.
        assert code == (3 if args[0] == "index" else 0), (args, out)
    _, search, search_json, info, _, _ = outputs
    assert search.strip() and info.strip()
    hits = json.loads(search_json)
    assert hits and all(h["total_pages"] >= 2 for h in hits)
    with DocPCIndex(tmp_path / "docpc-store") as index:
        assert len(index) >= 20
        assert document_id(DELETED) not in index.store
        assert index.resolve_ids([DELETED]) == []


README = REPO_ROOT / "README.md"


def test_the_readmes_quickstart_without_weights_runs_as_written(tmp_path: Path) -> None:
    """The README's first-screen quickstart, run from the checkout's root as a newcomer would, on the PDFs that ship
    in examples/pdfs (only its /tmp paths moved under this test's folder): every command exits 0."""
    import subprocess
    import sys

    section = README.read_text().split("## Try it", 1)[1]
    block = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0]
    lines = [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert [shlex.split(line)[0] for line in lines] == [".venv/bin/python"] + [".venv/bin/docpc"] * 3
    assert "examples/pdfs" in lines[1] and (REPO_ROOT / "examples" / "pdfs").is_dir()
    env = dict(os.environ, HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    bin_dir = Path(sys.executable).parent
    outputs = []
    for line in lines:
        argv = [a.replace("/tmp/", f"{tmp_path}/") for a in shlex.split(line)]
        argv[0] = str(bin_dir / Path(argv[0]).name)  # this interpreter's environment, wherever the checkout is
        proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        outputs.append(proc.stdout)
    assert "added 6, replaced 0, moved 0, removed 0, unchanged 0, failed 0" in outputs[1], outputs[1]
    hits = [line for line in outputs[2].splitlines() if re.match(r"\s*\d+\.\s", line)]  # "  1.    6.1061  Title"
    assert len(hits) == 3, outputs[2]
    assert str(tmp_path / "tiny-colqwen2") in outputs[3] and "fingerprint" in outputs[3]
