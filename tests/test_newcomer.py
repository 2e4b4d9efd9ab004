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
