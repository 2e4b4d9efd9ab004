"""Shared session fixtures: a tiny random ColQwen2 checkpoint and an encoder on it (no downloads)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing import build_tiny_colqwen2

# The choices timed once per machine (int8 kernel, threads) go to a folder of this run, not the user's cache: each
# test process and the commands it starts time them once, as a fresh machine would.
if "DOCPC_CACHE_DIR" not in os.environ:
    _machine_cache = tempfile.mkdtemp(prefix="docpc-test-cache-")
    os.environ["DOCPC_CACHE_DIR"] = _machine_cache
    atexit.register(shutil.rmtree, _machine_cache, ignore_errors=True)  # each test process removes its own


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder holding a tiny random ColQwen2 model + processor, built once per session (seed 0)."""
    return build_tiny_colqwen2(tmp_path_factory.mktemp("tiny_colqwen2") / "checkpoint", seed=0)


@pytest.fixture(scope="session")
def tiny_encoder(tiny_checkpoint: Path) -> ColPaliEncoder:
    """ColPaliEncoder on the tiny checkpoint, cpu/float32, loaded through the real from_pretrained path."""
    return ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def default_encoder(tiny_checkpoint: Path) -> ColPaliEncoder:
    """ColPaliEncoder on the tiny checkpoint with this machine's defaults, as the command line builds it (bfloat16
    on a CPU with native bfloat16, float32 elsewhere): the reference when a test compares the CLI's scores."""
    return ColPaliEncoder(tiny_checkpoint, device="cpu")


@pytest.fixture()
def fresh_chroma() -> Iterator[None]:
    """The test opens stores from disk, not from a Chroma system cached by an earlier test (use it module-wide
    with ``pytestmark = pytest.mark.usefixtures("fresh_chroma")``)."""
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    yield
    SharedSystemClient.clear_system_cache()
