"""Shared session fixtures: a tiny random ColQwen2 checkpoint and an encoder on it (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing import build_tiny_colqwen2


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder holding a tiny random ColQwen2 model + processor, built once per session (seed 0)."""
    return build_tiny_colqwen2(tmp_path_factory.mktemp("tiny_colqwen2") / "checkpoint", seed=0)


@pytest.fixture(scope="session")
def tiny_encoder(tiny_checkpoint: Path) -> ColPaliEncoder:
    """ColPaliEncoder on the tiny checkpoint, cpu/float32, loaded through the real from_pretrained path."""
    return ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32")
