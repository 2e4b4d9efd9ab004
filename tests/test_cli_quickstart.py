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

REPO_ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = REPO_ROOT / "examples" / "cli_quickstart.md"
CORPUS = Path(os.environ.get("DOCPC_PDF_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus" / "py-pdf-sample-files"))
DELETED = CORPUS / "001-trivial/minimal-document.pdf"


def _commands() -> list[list[str]]:
    text = QUICKSTART.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "the quickstart has one shell block"
    lines = [line.strip() for line in blocks[0].splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("docpc ")]


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"PDF corpus not found at {CORPUS}")
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
    assert hits and all(h["pages"] >= 2 for h in hits)
    with DocPCIndex(tmp_path / "docpc-store") as index:
        assert len(index) >= 20
        assert document_id(DELETED) not in index.store
        assert index.resolve_ids([DELETED]) == []
