"""``docpc index --prune/--meta``, ``docpc list``, ``docpc delete FOLDER/--where`` and the model rule, as real subprocesses."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import docpc_command, make_pdf, run_docpc, subprocess_env

pytestmark = pytest.mark.slow


def _folder(root: Path, names: list[str]) -> Path:
    for name in names:
        make_pdf(root / f"{name}.pdf", f"cli sync {name}", 1)
    return root


def _listed(store: Path, *extra: str) -> list[dict]:
    run = run_docpc("list", "--store", store, "--json", *extra)
    assert run.returncode == 0, run.describe()
    return run.json()


def test_index_list_move_prune_delete(tmp_path: Path, tiny_checkpoint: Path) -> None:
    model = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    docs = _folder(tmp_path / "docs", ["a", "b", "c"])
    (docs / "b.pdf.json").write_text(json.dumps({"customer": "acme"}))
    store = tmp_path / "store"
    run = run_docpc("index", docs, "--store", store, "--model", model, "--workers", "0", "--json",
                    "--meta", "dept=legal", "--meta", "year=2024")
    assert run.returncode == 0, run.describe()
    assert run.json()["added"] == 3
    rows = _listed(store)
    assert len(rows) == 3 and all(r["metadata"]["dept"] == "legal" and r["metadata"]["year"] == 2024 for r in rows)
    assert {r["file_name"] for r in rows if r["metadata"].get("customer") == "acme"} == {"b.pdf"}
    assert [r["file_name"] for r in _listed(store, "--where", '{"customer": "acme"}')] == ["b.pdf"]

    # the folder moves and one file is deleted: a re-index follows, a prune removes
    moved = tmp_path / "moved"
    docs.rename(moved)
    (moved / "c.pdf").unlink()
    assert len(_listed(store, "--missing")) == 3
    run = run_docpc("index", moved, "--store", store, "--prune", "--workers", "0")
    assert run.returncode == 0, run.describe()
    assert "added 0, replaced 0, moved 2, removed 0, unchanged 0, failed 0" in run.stdout
    # c.pdf's record names the old folder, outside the pruned root: a prune never touches it
    assert [r["file_name"] for r in _listed(store, "--missing")] == ["c.pdf"]
    run = run_docpc("delete", docs, "--store", store)  # a folder gone from disk still names its documents
    assert run.returncode == 0 and "deleted 1 document" in run.stdout, run.describe()
    make_pdf(moved / "d.pdf", "cli sync d", 1)
    (moved / "a.pdf").unlink()
    run = run_docpc("index", moved, "--store", store, "--prune", "--workers", "0", "--json")
    assert run.returncode == 0, run.describe()
    assert {k: run.json()[k] for k in ("added", "moved", "removed", "unchanged")} == \
        {"added": 1, "moved": 0, "removed": 1, "unchanged": 1}
    rows = _listed(store)
    assert sorted(r["source"] for r in rows) == [str((moved / n).resolve()) for n in ("b.pdf", "d.pdf")]
    assert _listed(store, "--missing") == []

    # a mistyped root is a usage error and deletes nothing
    run = run_docpc("index", tmp_path / "mvoed", "--store", store, "--prune", "--workers", "0")
    assert run.returncode == 2 and "no such file or folder" in run.stderr and len(_listed(store)) == 2

    run = run_docpc("delete", "--store", store, "--where", '{"customer": "acme"}')
    assert run.returncode == 0 and "deleted 1 document" in run.stdout, run.describe()
    run = run_docpc("delete", moved, "--store", store)
    assert run.returncode == 0 and "deleted 1 document" in run.stdout, run.describe()
    assert _listed(store) == []


def test_model_rule_on_the_command_line(tmp_path: Path, tiny_checkpoint: Path) -> None:
    model = Path(shutil.copytree(tiny_checkpoint, tmp_path / "tiny"))
    store = tmp_path / "store"
    assert run_docpc("index", _folder(tmp_path / "docs", ["m"]), "--store", store, "--model", model,
                     "--workers", "0").returncode == 0
    info = run_docpc("info", "--store", store, "--json").json()
    assert info["model_fingerprint"].startswith("sha256:") and info["model_path"] == str(model.resolve())
    renamed = model.rename(tmp_path / "tiny_moved")
    run = run_docpc("search", "cli sync", "--store", store)
    assert run.returncode == 1 and "--model DIR" in run.stderr and info["model_fingerprint"] in run.stderr
    run = run_docpc("search", "cli sync", "--store", store, "--model", renamed, "--json")
    assert run.returncode == 0 and len(run.json()) == 1, run.describe()


def test_mistakes_do_not_create_stores(tmp_path: Path) -> None:
    run = run_docpc("delete", "abc", "--store", tmp_path / "nope")
    assert run.returncode == 1 and "no docpc store at" in run.stderr and not (tmp_path / "nope").exists()
    run = run_docpc("list", "--store", tmp_path / "nope")
    assert run.returncode == 1 and not (tmp_path / "nope").exists()
    run = run_docpc("index", tmp_path / "doesnotexist", "--store", tmp_path / "s")
    assert run.returncode == 2 and "no such file or folder" in run.stderr and not (tmp_path / "s").exists()
    (tmp_path / "empty").mkdir()
    run = run_docpc("index", tmp_path / "empty", "--store", tmp_path / "s")
    assert run.returncode == 2 and "no PDF under" in run.stderr and not (tmp_path / "s").exists()
    run = run_docpc("index", tmp_path / "empty", "--store", tmp_path / "s", "--meta", "_x=1")
    assert run.returncode == 2 and "reserved" in run.stderr


def test_closed_pipe_ends_quietly(tmp_path: Path, tiny_checkpoint: Path) -> None:
    store = tmp_path / "store"
    assert run_docpc("index", _folder(tmp_path / "docs", ["p"]), "--store", store, "--model", tiny_checkpoint,
                     "--workers", "0").returncode == 0
    for command in (["info"], ["list"], ["list", "--json"]):
        proc = subprocess.Popen([*docpc_command(), *command, "--store", str(store)], env=subprocess_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.close()  # the reader left before a line was written, as `| head -0` would
        _, err = proc.communicate(timeout=120)
        assert b"BrokenPipe" not in err and b"Traceback" not in err, err.decode()
        assert proc.returncode == 141, (command, proc.returncode, err.decode())
