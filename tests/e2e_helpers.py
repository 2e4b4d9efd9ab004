"""Helpers shared by the end-to-end tests of the index engine (test_index.py) and the CLI (test_cli.py).

The ``docpc`` command is run as a real subprocess (the console script next to the
running interpreter, else ``python -m docpc_retrievers.cli.app``) with the Hugging Face hub
offline. Independent commands can run in parallel: each one loads torch and
colpali-engine (about 15 s of imports), so running them side by side keeps the
suite short on 2 cores. Output goes to files, never pipes, so a chatty process
cannot block while another one is awaited.

Corpus files (py-pdf-sample-files) are read-only; tests write only under tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from docpc_retrievers.testing.support import CORPUS, needs_corpus

MINIMAL = CORPUS / "001-trivial/minimal-document.pdf"
FOUR_PAGES = CORPUS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf"
ENCRYPTED = CORPUS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf"
ENCRYPTED_PASSWORD = "openpassword"
IMAGEMAGICK = CORPUS / "007-imagemagick-images/imagemagick-images.pdf"
GEOTOPO = CORPUS / "009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
GOOGLE_DOC = CORPUS / "011-google-doc-document/google-doc-document.pdf"
ROTATED = CORPUS / "015-arabic/habibi-rotated.pdf"
ZERO_PAGES = CORPUS / "017-unreadable-meta-data/unreadablemetadata.pdf"
ANNOTATED = CORPUS / "024-annotations/annotated_pdf.pdf"
MULTICOLUMN = CORPUS / "026-latex-multicolumn/multicolumn.pdf"

#: PDFs in the corpus (29 in the repository's, 31 in the whole collection), documents the acceptance run indexes
#: (all but the two failures: the encrypted one and the one with zero pages).
CORPUS_PDF_COUNT = len([p for p in CORPUS.rglob("*") if p.suffix.lower() == ".pdf"])
CORPUS_INDEXABLE = CORPUS_PDF_COUNT - 2

#: Every run of ``docpc`` gets at most this long.
COMMAND_TIMEOUT_S = 420


def docpc_command() -> list[str]:
    """The installed ``docpc`` console script beside this interpreter, else ``python -m docpc_retrievers.cli.app``."""
    script = Path(sys.executable).with_name("docpc")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "docpc_retrievers.cli.app"]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The test environment with the hub offline and telemetry off."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        ANONYMIZED_TELEMETRY="False",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@dataclass(frozen=True)
class Run:
    """A finished command: its arguments, exit code and captured output."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.args)}\nexit code {self.returncode}\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )

    def json(self) -> Any:
        """stdout parsed as JSON (the command was run with --json)."""
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"stdout is not JSON ({exc}):\n{self.describe()}") from None


def _argv(args: Sequence[str | os.PathLike[str]]) -> list[str]:
    return docpc_command() + [os.fspath(a) for a in args]


def run_docpc(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = COMMAND_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> Run:
    """Run ``docpc ARGS...`` to completion and capture its output (``stdin``: text fed to its standard input)."""
    argv = _argv(args)
    proc = subprocess.run(
        argv,
        cwd=cwd,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        env=dict(env) if env is not None else subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(argv, proc.returncode, proc.stdout, proc.stderr)


def run_docpc_parallel(
    commands: Mapping[str, Sequence[str | os.PathLike[str]]],
    log_dir: Path,
    *,
    cwd: Mapping[str, str | os.PathLike[str]] | None = None,
    timeout: float = COMMAND_TIMEOUT_S,
) -> dict[str, Run]:
    """Run several independent ``docpc`` commands side by side; return each one's result by name.

    Each process gets one intra-op thread so that several of them share 2 cores without
    oversubscription. Processes still running at the deadline are killed (only these,
    by their own handles) and the call fails.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    env = subprocess_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    started: dict[str, tuple[list[str], subprocess.Popen[bytes], Path, Path]] = {}
    try:
        for name, args in commands.items():
            argv = _argv(args)
            out, err = log_dir / f"{name}.out", log_dir / f"{name}.err"
            with out.open("wb") as fo, err.open("wb") as fe:
                proc = subprocess.Popen(
                    argv, cwd=(cwd or {}).get(name), env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL
                )
            started[name] = (argv, proc, out, err)
        deadline = time.monotonic() + timeout
        results: dict[str, Run] = {}
        for name, (argv, proc, out, err) in started.items():
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            results[name] = Run(argv, rc, out.read_text(errors="replace"), err.read_text(errors="replace"))
        return results
    finally:
        for _argv_, proc, _out, _err in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def copy_store(src: Path, dst: Path) -> Path:
    """A byte-for-byte copy of a store directory (tests that change a store work on a copy)."""
    shutil.copytree(src, dst)
    return dst


def clear_chroma_cache() -> None:
    """Forget Chroma's per-path client systems, so the next open reads the store from disk."""
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def make_pdf(path: Path, label: str, n_pages: int = 2) -> Path:
    """Write a small distinct PDF (text and shapes that depend on ``label``) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    try:
        shade = (sum(map(ord, label)) % 200) / 255.0
        for i in range(n_pages):
            page = doc.new_page(width=595, height=842)
            page.insert_text((72, 100), f"{label}, page {i + 1} of {n_pages}", fontsize=22)
            page.insert_text((72, 140), f"Section {i + 1}: notes about {label}", fontsize=12)
            rect = pymupdf.Rect(72, 180 + 30 * i, 300 + 20 * i, 420)
            page.draw_rect(rect, color=(0, 0, 0), fill=(shade, 0.3, 1 - shade))
        doc.set_metadata({"title": label})
        doc.save(path)
    finally:
        doc.close()
    return path


def make_slow_pdf(path: Path, repeats: int = 100) -> Path:
    """A tiny PDF that MuPDF renders for a long time: a form drawn 1,000 times, each drawing 1,000 rectangles,
    ``repeats`` times over (about 0.6 s per repeat on one core). Hostile content streams like it exist."""
    rects = b"".join(b"%d %d 2 2 re f\n" % (i % 500, (i // 500) % 700) for i in range(1000))
    uses = b"/A Do\n" * 1000
    page = b"/B Do\n" * repeats
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /B 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(page), page),
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /A 6 0 R >> >> "
        b"/Length %d >>\nstream\n%s\nendstream" % (len(uses), uses),
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Length %d >>\nstream\n%s\nendstream" % (len(rects), rects),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path
