"""One version everywhere, and newer than every release the docs call old."""

from __future__ import annotations

import re
from pathlib import Path

import docpc_retrievers
from docpc_retrievers import cli

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_the_command_and_pyproject_agree_on_a_version_newer_than_the_last_release(capsys) -> None:  # type: ignore[no-untyped-def]
    # The [project] table's version line (tomllib is not in Python 3.10, which the package supports).
    project = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1].split("\n[", 1)[0]
    (declared,) = re.findall(r'^version = "([^"]+)"$', project, flags=re.M)
    assert docpc_retrievers.__version__ == declared
    try:
        cli.main(["--version"])
    except SystemExit as exc:  # argparse's version action exits 0
        assert exc.code in (0, None)
    assert declared in capsys.readouterr().out
    changelog = (ROOT / "CHANGELOG.md").read_text()
    minor = ".".join(declared.split(".")[:2])
    if "dev" in declared:  # a development version: its minor is the changelog's section in development
        assert re.search(rf"^## {re.escape(minor)} \(in development\)", changelog, flags=re.M)
    released = re.findall(r"^## (\d+\.\d+) (?!\(in development\))", changelog, flags=re.M)
    assert released and max(tuple(map(int, v.split("."))) for v in released) < tuple(map(int, minor.split(".")))
