"""The package and both integrations under the oldest and newest Pythons they declare: every public module imports,
three PDFs are indexed with the tiny checkpoint and searched, both retrievers answer (docpc_retrievers/testing/
smoke.py), each in the environment scripts/setup.sh made for that Python (.venv-py3.X). A declared Python that is
not on this machine is skipped with its name; the one running this suite is tested here directly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from declared_pythons import declared  # noqa: E402

ENDS = list(dict.fromkeys([declared()[0], declared()[-1]]))
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_the_declared_pythons_are_the_same_in_all_three_packages_and_include_this_one() -> None:
    assert declared()[0] == "3.10" and HERE in declared()
    for pyproject in (ROOT / "pyproject.toml", *ROOT.glob("integrations/*/pyproject.toml")):
        assert 'requires-python = ">=3.10"' in pyproject.read_text(), pyproject


@pytest.mark.parametrize("version", ENDS)
def test_the_smoke_test_passes_under_the_oldest_and_newest_declared_python(version: str) -> None:
    python = sys.executable if version == HERE else str(ROOT / f".venv-py{version}" / "bin" / "python")
    if not Path(python).is_file():
        pytest.skip(f"no .venv-py{version}: DOCPC_OTHER_PYTHONS=1 bash scripts/setup.sh makes it where Python "
                    f"{version} is on this machine and the disk holds its torch (setup's output says which)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    run = subprocess.run([python, "-m", "docpc_retrievers.testing.smoke"], capture_output=True, text=True, env=env,
                         timeout=900, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"modules import on Python {version}" in run.stdout
    assert "ok: both framework retrievers answered" in run.stdout
