"""Encoding in a process of its own (encoders/process.py): the same vectors, bit for bit, as encoding on a thread;
a child that dies or cannot load its model fails the run with a clear error, keeps what was committed, leaves
no pixel files, and a re-run completes the store."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import clear_chroma_cache, make_pdf, run_docpc

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.encoders import process as encoder_process
from docpc_retrievers.errors import EncodingProcessError, ModelLoadError
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.pixel_files import spool_dir
from docpc_retrievers.timeline import Timeline

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow]

CPU = {"device": "cpu", "dtype": "float32"}


def _leftover_pixels() -> list[str]:
    folder = spool_dir(fallback=True)
    prefix = f"docpc-encode-{os.getpid()}-"
    return [n for n in os.listdir(folder) if n.startswith(prefix)] if folder else []


def _stored(index: DocPCIndex, ids: list[str]) -> dict[str, tuple[bytes, Any]]:
    docs = {d.id: d for d in index.store.get(ids)}
    return {i: (index.store.vectors(i).tobytes(), docs[i].metadata.get("token_grid")) for i in ids}


@pytest.fixture()
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[encoder_process.EncoderProcess]:
    """Every encoding process a test's runs start (to check one was used, or to stop one)."""
    made: list[encoder_process.EncoderProcess] = []
    real = encoder_process.EncoderProcess.__init__

    def recording(self: encoder_process.EncoderProcess, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(encoder_process.EncoderProcess, "__init__", recording)
    return made


def test_encoding_in_its_own_process_stores_what_the_thread_stores_bit_for_bit(
    tmp_path: Path, tiny_checkpoint: Path, spawned: list[encoder_process.EncoderProcess]
) -> None:
    files = [make_pdf(tmp_path / "pdfs" / f"p{i}.pdf", f"process {i}", 1 + i % 3) for i in range(7)]
    stored: dict[tuple[str, str], dict[str, tuple[bytes, Any]]] = {}
    settings: dict[tuple[str, str], Any] = {}
    for mode in ("grid", "page"):
        for where in ("thread", "process"):
            clear_chroma_cache()
            index_settings = IndexSettings() if mode == "grid" else IndexSettings(mode="page", pages=None)
            timeline = Timeline()
            with DocPCIndex(tmp_path / f"{mode}-{where}", model=tiny_checkpoint, encoder_kwargs=CPU,
                            settings=index_settings, writable=True) as index:
                # the process run renders in worker processes too: pixels from a worker, to this process, to the child
                report = index.add_pdfs(files, batch_size=3, workers=2 if where == "process" else 0, encode_in=where,
                                        timeline=timeline)
                assert len(report.indexed) == 7 and not report.failed
                stored[mode, where] = _stored(index, report.indexed)
                settings[mode, where] = index.store.settings["encoder"]
                # the process run never loads the model in this process, and its forward passes reach the timeline
                assert (index._encoders._encoder is None) == (where == "process")
                assert timeline.summary()["lanes"]["encode.forward"]["spans"] >= 1
                assert report.timings.get("encode_s", 0) > 0
    for mode in ("grid", "page"):
        assert stored[mode, "process"] == stored[mode, "thread"]
        assert settings[mode, "process"] == settings[mode, "thread"]
    assert all(grid is not None for _, grid in stored["grid", "process"].values())
    assert len(spawned) == 2 and all(p._process.poll() is not None for p in spawned)  # each run stopped its own
    assert _leftover_pixels() == []


def test_an_encoding_process_that_dies_fails_the_run_keeps_its_commits_and_a_rerun_completes_it(
    tmp_path: Path, tiny_checkpoint: Path, tiny_encoder: Any, spawned: list[encoder_process.EncoderProcess]
) -> None:
    files = [make_pdf(tmp_path / "pdfs" / f"k{i}.pdf", f"killed {i}") for i in range(8)]
    seen: list[str] = []

    def kill_at_the_fifth(path: Path, outcome: str) -> None:
        seen.append(outcome)
        if len(seen) == 5:
            os.kill(spawned[0].pid, signal.SIGKILL)

    store = tmp_path / "S"
    with DocPCIndex(store, model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
        with pytest.raises(EncodingProcessError, match=r"ended \(signal SIGKILL\).*run again"):
            index.add_pdfs(files, batch_size=2, workers=0, encode_in="process", on_file=kill_at_the_fifth)
        kept = index.store.count()
    assert kept < 8 and _leftover_pixels() == []
    clear_chroma_cache()
    with DocPCIndex(store, model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
        report = index.add_pdfs(files, batch_size=2, workers=0, encode_in="process")
        assert len(report.indexed) == 8 - kept and len(report.skipped) == kept
        resumed = _stored(index, index.store.ids())
    clear_chroma_cache()
    with DocPCIndex(tmp_path / "clean", encoder=tiny_encoder, writable=True) as index:
        clean = index.add_pdfs(files, batch_size=2, workers=0)
        assert resumed == _stored(index, clean.indexed)


def test_a_model_the_encoding_process_cannot_load_is_the_runs_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-checkpoint"
    files = [make_pdf(tmp_path / "pdfs" / "a.pdf", "a")]
    with DocPCIndex(tmp_path / "S", model=missing, encoder_kwargs=CPU, writable=True) as index:
        with pytest.raises(ModelLoadError, match="no-such-checkpoint"):
            index.add_pdfs(files, workers=0, encode_in="process")
        assert index.store.count() == 0
    assert _leftover_pixels() == []


def test_where_a_run_encodes_is_checked_and_auto_stays_in_this_process_on_a_cpu(
    tmp_path: Path, tiny_checkpoint: Path, spawned: list[encoder_process.EncoderProcess]
) -> None:
    files = [make_pdf(tmp_path / "pdfs" / "b.pdf", "b")]
    with DocPCIndex(tmp_path / "S", model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
        with pytest.raises(ValueError, match="encode_in must be one of auto, process, thread"):
            index.add_pdfs(files, encode_in="gpu")
        assert len(index.add_pdfs(files, workers=0).indexed) == 1  # auto: a CPU device encodes here
    assert spawned == []
    remote = encoder_process.RemoteEncoder("m", 4, 2, {"dim": 4}, "the model m")
    assert remote.settings() == {"dim": 4}
    with pytest.raises(EncodingProcessError, match="the model m runs in the indexing run's encoding process"):
        remote.encode_queries(["a query"])


def test_docpc_index_encodes_in_a_process_when_asked_and_says_what_it_did(tmp_path: Path, tiny_checkpoint: Path) -> None:
    files = [make_pdf(tmp_path / "pdfs" / f"c{i}.pdf", f"command {i}") for i in range(3)]
    store = tmp_path / "S"
    timeline = tmp_path / "timeline.json"
    run = run_docpc("index", *files, "--store", store, "--model", tiny_checkpoint, "--encode-in", "process",
                    "--no-progress", "--json", "--timeline", timeline)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["indexed"] == 3
    assert "in an encoding process" in run.stderr
    recorded = json.loads(timeline.read_text())  # the child's forward passes and this process's commits, one clock
    lanes = recorded["summary"]["lanes"]
    assert lanes["encode.forward"]["spans"] >= 1 and lanes["commit"]["spans"] >= 1
    assert all(0 <= start <= end <= recorded["summary"]["wall_s"] for _, start, end in recorded["spans"])
    assert "where the time went: " in run.stderr and f"every span in {timeline}" in run.stderr
    refused = run_docpc("index", *files, "--store", store, "--encode-in", "gpu")
    assert refused.returncode == 2 and "invalid choice: 'gpu'" in refused.stderr


def test_a_model_given_for_a_store_is_checked_in_the_encoding_process_before_anything_changes(
    tmp_path: Path, tiny_checkpoint: Path, spawned: list[encoder_process.EncoderProcess]
) -> None:
    """The check a given model gets on a store that records one (even when nothing needs encoding) is made by the
    run's encoding process, which then encodes with the model it loaded: this process never loads it."""
    from docpc_retrievers.errors import ModelMismatchError
    from docpc_retrievers.testing import build_tiny_colqwen2

    other = build_tiny_colqwen2(tmp_path / "other", seed=1)
    docs = [make_pdf(tmp_path / "pdfs" / f"m{i}.pdf", f"checked {i}") for i in range(3)]
    store = tmp_path / "S"
    with DocPCIndex(store, model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
        assert len(index.add_pdfs(docs[:2], workers=0, encode_in="process").indexed) == 2
    clear_chroma_cache()
    with DocPCIndex(store, model=other, encoder_kwargs=CPU, writable=True) as index:
        with pytest.raises(ModelMismatchError, match="different weights or configuration"):
            index.add_pdfs(docs[:2], workers=0, encode_in="process")  # nothing to encode: refused all the same
        assert index.store.count() == 2 and index._encoders._encoder is None
    clear_chroma_cache()
    with DocPCIndex(store, model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
        report = index.add_pdfs(docs, workers=0, encode_in="process")
        assert len(report.indexed) == 1 and len(report.skipped) == 2 and index._encoders._encoder is None
    assert len(spawned) == 3 and _leftover_pixels() == []


def test_auto_encodes_in_a_process_on_a_cuda_gpu_for_runs_of_enough_files(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docpc_retrievers.encoders.loader import EncoderRecipe
    from docpc_retrievers.indexing import AUTO_PROCESS_FILES

    with DocPCIndex(tmp_path / "S", model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
        indexer = index._indexer
        assert indexer.process_recipe("auto", 1000) is None  # this machine's device: the CPU
        monkeypatch.setattr(EncoderRecipe, "device", lambda self: "cuda:0")  # as on a GPU machine
        recipe = indexer.process_recipe("auto", AUTO_PROCESS_FILES)
        assert recipe is not None and recipe.model == str(tiny_checkpoint) and recipe.options.device == "cpu"
        assert indexer.process_recipe("auto", AUTO_PROCESS_FILES - 1) is None
        assert indexer.process_recipe("thread", 1000) is None and indexer.process_recipe("process", 1) is not None
        assert index.encoder.dim > 0  # loaded here now: a second copy elsewhere would be loaded for nothing
        assert indexer.process_recipe("auto", 1000) is None and indexer.process_recipe("process", 1000) is None
    with DocPCIndex(tmp_path / "S2", encoder=index.encoder, writable=True) as given:  # an object cannot move
        assert given._indexer.process_recipe("process", 1000) is None


def test_pixels_go_through_the_pipe_when_shared_memory_has_no_room(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
    spawned: list[encoder_process.EncoderProcess],
) -> None:
    """A container's /dev/shm holds 64 MB by default, less than a few chunks of pixels: a write that fails there
    sends the chunk through the pipe, and the vectors are the same."""
    files = [make_pdf(tmp_path / "pdfs" / f"s{i}.pdf", f"spool {i}", 1 + i % 2) for i in range(4)]
    monkeypatch.setattr(encoder_process, "spool_dir", lambda fallback=False: str(tmp_path / "no-room"))
    stored = {}
    for where in ("thread", "process"):
        clear_chroma_cache()
        with DocPCIndex(tmp_path / where, model=tiny_checkpoint, encoder_kwargs=CPU, writable=True) as index:
            report = index.add_pdfs(files, batch_size=2, workers=0, encode_in=where)
            assert len(report.indexed) == 4
            stored[where] = _stored(index, report.indexed)
    assert stored["process"] == stored["thread"]
    assert len(spawned) == 1 and spawned[0].spool_full
