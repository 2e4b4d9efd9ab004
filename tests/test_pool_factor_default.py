"""The quality-first default: new stores keep every vector; a pooled store keeps its factor; another is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import make_pdf, run_docpc

from docpc_retrievers import DocPCIndex, IndexSettings, SettingsMismatchError
from docpc_retrievers.encoders import ColPaliEncoder

pytestmark = pytest.mark.usefixtures("fresh_chroma")


def _docs(folder: Path) -> Path:
    for i, label in enumerate(["harbour budget", "wind turbines", "lentil recipes"]):
        make_pdf(folder / f"doc{i}.pdf", label, 1 + i)
    return folder


def test_a_store_built_with_no_options_keeps_every_vector_and_says_pool_factor_1(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    done = run_docpc("index", _docs(tmp_path / "docs"), "--store", tmp_path / "store", "--model", tiny_checkpoint)
    assert done.returncode == 0, done.describe()
    info = run_docpc("info", "--store", tmp_path / "store", "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["pool_factor"] == 1
    with DocPCIndex(tmp_path / "store", model=tiny_checkpoint) as index:
        stored = index.store.get(include_vectors=True)
        visual = [d.n_vectors for d in stored]
    assert visual and all(n >= 64 for n in visual)  # the tiny model's 64 visual tokens a grid, none pooled away


def test_a_pooled_store_keeps_its_factor_and_refuses_another_with_the_command_that_rebuilds(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    docs = _docs(tmp_path / "docs")
    with DocPCIndex.from_pdfs([docs], tmp_path / "store", encoder=tiny_encoder, workers=0,
                              settings=IndexSettings(pool_factor=2)) as index:
        pooled = [d.n_vectors for d in index.store.get()]
    with DocPCIndex(tmp_path / "store", encoder=tiny_encoder) as index:
        assert index.info()["pool_factor"] == 2 and len(index.search("wind turbines", 3)) == 3
    # shortcuts that change page selection only keep the recorded factor
    with DocPCIndex.from_pdfs([docs], tmp_path / "store", encoder=tiny_encoder, workers=0, strategy="first") as index:
        assert index.settings.pool_factor == 2 and [d.n_vectors for d in index.store.get()] == pooled
    with pytest.raises(SettingsMismatchError, match=r"pool_factor: store has 2, got 1.*--pool-factor 1"):
        DocPCIndex(tmp_path / "store", encoder=tiny_encoder, settings=IndexSettings(pool_factor=1))
    done = run_docpc("index", docs, "--store", tmp_path / "store", "--pool-factor", "1",
                     "--model", tiny_encoder.model_id)
    assert done.returncode != 0 and "docpc index YOUR_PDFS --store NEW_STORE --pool-factor 1" in done.stderr
