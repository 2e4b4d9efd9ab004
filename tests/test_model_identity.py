"""A store names its model by content (fingerprint), so it moves with its model to any path or machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from e2e_helpers import clear_chroma_cache, make_pdf

from docpc_retrievers import DocPCIndex, ModelLoadError, ModelMismatchError
from docpc_retrievers.encoders.checkpoints import fingerprint_folder, hub_origin
from docpc_retrievers.encoders.identity import ModelIdentity
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.testing import build_tiny_colqwen2
from docpc_retrievers.testing.chroma_server import ChromaServer


pytestmark = pytest.mark.usefixtures("fresh_chroma")


@pytest.fixture(scope="module")
def other_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny checkpoint (seed 1): the same architecture, other weights."""
    return build_tiny_colqwen2(tmp_path_factory.mktemp("identity_other") / "checkpoint", seed=1)


@pytest.fixture()
def built(tmp_path: Path, tiny_checkpoint: Path) -> tuple[Path, Path]:
    """A store indexed with a copy of the tiny checkpoint at ``model-a``: (store, model folder)."""
    model = Path(shutil.copytree(tiny_checkpoint, tmp_path / "model-a"))
    docs = tmp_path / "docs"
    for i in range(3):
        make_pdf(docs / f"d{i}.pdf", f"identity document {i}", 1)
    with DocPCIndex.from_pdfs([docs], tmp_path / "store", model=model, encoder_kwargs={"device": "cpu"}, workers=0):
        pass
    clear_chroma_cache()
    return tmp_path / "store", model


def test_fingerprint_ignores_where_the_folder_is(tmp_path: Path, tiny_checkpoint: Path, other_checkpoint: Path) -> None:
    copy = shutil.copytree(tiny_checkpoint, tmp_path / "somewhere" / "else")
    assert fingerprint_folder(Path(copy)) == fingerprint_folder(tiny_checkpoint)
    assert fingerprint_folder(other_checkpoint) != fingerprint_folder(tiny_checkpoint)


def test_hub_origin_of_cache_snapshots_and_local_dir_copies(tmp_path: Path) -> None:
    commit = "a" * 40
    snap = tmp_path / "hub" / "models--vidore--colqwen2-v1.0" / "snapshots" / commit
    snap.mkdir(parents=True)
    assert hub_origin(snap) == ("vidore/colqwen2-v1.0", commit)
    local = tmp_path / "local-dir"
    (local / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (local / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text(f"{commit}\netag\n1.0\n")
    assert hub_origin(local) == (None, commit)
    assert hub_origin(tmp_path) == (None, None)


def test_identity_rules_and_legacy_records() -> None:
    legacy = ModelIdentity.from_settings({"model_id": "/old/tiny", "revision": "sha256:abc", "family": "colqwen2"})
    assert legacy.fingerprint == "sha256:abc" and legacy.path == "/old/tiny" and legacy.hub_id is None
    moved = ModelIdentity.from_settings({"model_id": "/new/tiny", "path": "/new/tiny", "fingerprint": "sha256:abc",
                                         "family": "colqwen2"})
    assert legacy.differences(moved) == []
    other = ModelIdentity(family="colqwen2", fingerprint="sha256:def", path="/x")
    assert "sha256:abc" in legacy.differences(other)[0] and "sha256:def" in legacy.differences(other)[0]
    hub = ModelIdentity.from_settings({"model_id": "vidore/colqwen2-v1.0", "revision": "c" * 40})
    local_copy = ModelIdentity(fingerprint="sha256:111", revision="c" * 40, path="/models/colqwen2")
    assert hub.hub_id == "vidore/colqwen2-v1.0" and hub.differences(local_copy) == []  # same hub commit
    assert hub.candidates() == ["vidore/colqwen2-v1.0"]
    custom = ModelIdentity.from_settings({"model_id": "m1"})
    assert custom.differences(ModelIdentity.from_settings({"model_id": "m2"})) == ["model_id: store has 'm1', got 'm2'"]


def test_renamed_model_folder_is_accepted_and_named_in_errors(built: tuple[Path, Path]) -> None:
    store, model = built
    moved = model.rename(model.with_name("model-renamed"))
    with DocPCIndex(store) as index:
        with pytest.raises(ModelLoadError) as caught:
            index.search("identity document", 2)
        message = str(caught.value)
        assert "fingerprint sha256:" in message and "--model DIR" in message and str(model) in message
    with DocPCIndex(store, model=model) as index:  # the old path, given again: the store's model is named
        with pytest.raises(ModelLoadError) as caught:
            index.search("identity document", 2)
        message = str(caught.value)
        assert f"Model folder {str(model)!r} does not exist. This store was built with folder {model}" in message
        assert "fingerprint sha256:" in message and "--model DIR" in message and "vidore" not in message
    with DocPCIndex(store, model=moved) as index:
        assert len(index.search("identity document", 2)) == 2
        info = index.info()
        assert info["model_fingerprint"] == fingerprint_folder(moved)


def test_a_copy_elsewhere_works_and_another_checkpoint_is_refused(
    built: tuple[Path, Path], tmp_path: Path, other_checkpoint: Path
) -> None:
    store, model = built
    copy = Path(shutil.copytree(model, tmp_path / "elsewhere" / "copy"))
    with DocPCIndex(store, model=copy) as index:
        assert len(index.search("identity document", 3)) == 3
    with DocPCIndex(store, model=other_checkpoint) as index:
        with pytest.raises(ModelMismatchError) as caught:
            index.search("identity document", 2)
    message = str(caught.value)
    assert fingerprint_folder(model) in message and fingerprint_folder(other_checkpoint) in message
    assert "different weights or configuration" in message


def test_a_first_run_whose_model_cannot_load_records_no_model_and_runs_again_with_one(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """A failed first run left a store that said it used the default hub model; the same command with a model that
    loads must then index."""
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", "first run", 1)
    with DocPCIndex(tmp_path / "store", model=tmp_path / "no-such-model", writable=True) as index:
        with pytest.raises(ModelLoadError) as caught:
            index.add_pdfs([docs], workers=0)
        assert "no-such-model' does not exist" in str(caught.value)
        assert index.info()["model"] is None and index.store.count() == 0
    with DocPCIndex(tmp_path / "store", model=tiny_checkpoint, writable=True) as index:  # the same, with a model
        assert len(index.add_pdfs([docs], workers=0).indexed) == 1
        assert index.info()["model_fingerprint"] == fingerprint_folder(tiny_checkpoint)


def test_another_checkpoint_is_refused_even_when_no_file_needs_encoding(
    built: tuple[Path, Path], tmp_path: Path, other_checkpoint: Path
) -> None:
    """Re-indexing unchanged files with another model was reported as "unchanged 3": the mismatch must show."""
    store, _model = built
    with DocPCIndex(store, model=other_checkpoint, writable=True) as index:
        with pytest.raises(ModelMismatchError):
            index.add_pdfs([tmp_path / "docs"], workers=0)
        assert index.store.count() == 3  # nothing changed


def test_store_written_before_identities_opens_and_is_upgraded_on_write(built: tuple[Path, Path], tmp_path: Path) -> None:
    store, model = built
    with MultiVectorStore(store, writable=True) as raw:  # rewrite the record as 0.2 wrote it
        settings = raw.settings
        enc = settings["encoder"]
        old = {k: enc[k] for k in ("family", "dim", "max_num_visual_tokens", "mask_non_image_embeddings", "base_model")}
        old.update(model_id=str(model.resolve()), revision=enc["fingerprint"])
        raw.engine.write_manifest({"settings": {**settings, "encoder": old}})
    clear_chroma_cache()
    copy = Path(shutil.copytree(model, tmp_path / "copy-for-legacy"))
    shutil.rmtree(model)  # the recorded path is gone; only the copy is here
    with DocPCIndex(store, model=copy) as index:
        assert len(index.search("identity document", 3)) == 3
    clear_chroma_cache()
    make_pdf(tmp_path / "new" / "n.pdf", "a new identity document", 1)
    with DocPCIndex(store, model=copy, writable=True) as index:
        assert index.add_pdfs([tmp_path / "new"], workers=0).counts()["added"] == 1
        encoder = index.store.settings["encoder"]
    assert encoder["fingerprint"] == fingerprint_folder(copy) and encoder["path"] == str(copy.resolve())
    clear_chroma_cache()
    with DocPCIndex(store) as index:  # the upgraded record now points at the copy
        assert len(index.search("identity document", 4)) == 4


@pytest.mark.slow
def test_server_reader_with_only_the_address_and_its_own_model_copy(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    writer_model = Path(shutil.copytree(tiny_checkpoint, tmp_path / "writer" / "model"))
    reader_model = Path(shutil.copytree(tiny_checkpoint, tmp_path / "reader" / "their-model"))
    docs = tmp_path / "docs"
    for i in range(3):
        make_pdf(docs / f"s{i}.pdf", f"server identity document {i}", 1)
    server = ChromaServer(tmp_path / "chroma-data")
    server.start()
    try:
        on = {"host": server.host, "port": server.port, "collection": "identity"}
        with DocPCIndex.from_pdfs([docs], tmp_path / "writer" / "cache", model=writer_model, workers=0, **on):
            pass
        shutil.rmtree(writer_model)  # the writer's path does not exist for the reader
        with DocPCIndex(tmp_path / "reader" / "cache", model=reader_model, **on) as index:
            hits = index.search("server identity document", 3)
            assert len(hits) == 3
            assert json.loads(json.dumps(index.info()))["model_fingerprint"] == fingerprint_folder(reader_model)
    finally:
        server.stop()
