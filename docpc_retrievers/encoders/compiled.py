"""The model's repeated blocks compiled on CUDA, once a run has encoded enough images to repay the compile.

``torch.compile`` of each transformer block (regional compilation: the vision blocks share one compiled graph, the
decoder layers another) made ColQwen2's ``encode_images`` 1.31x faster on an H200 (47.7 against 36.5 images/s at
768 visual tokens; the forward pass alone 60.2 against 44.7), after about 20 s of compiling for the first shape and
as long again for a second number of visual tokens (benchmarks/results/2026-11-28-gpu-h200-encoder-levers.md). That
repays itself only after about 6,000 images, so a run never waits for a compiler before it has encoded ``after``
images (5,000 by default) in its process; past that, the slower start costs at most a third of what the run had
already spent, and a run of 100,000 images is about 1.25x faster. Queries keep the eager blocks (their short shapes
would each need a compile of their own), and a compile that fails leaves the blocks eager for good, with one warning.
``DOCPC_COMPILE_AFTER``: a number of images, 0 for at once, ``never`` to keep the model eager.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["DEFAULT_COMPILE_AFTER", "CompiledBlocks", "compile_after"]

logger = logging.getLogger(__name__)

#: Images a process encodes eagerly before it compiles the model's blocks (CUDA only).
DEFAULT_COMPILE_AFTER = 5000


def compile_after(device: str, env: str = "DOCPC_COMPILE_AFTER") -> int | None:
    """Images after which ``device`` compiles the blocks: None (never) off CUDA or when the variable says never."""
    value = os.environ.get(env, "").strip().lower()
    if value in ("never", "off", "no", "false"):
        return None
    if value:
        try:
            after = int(value)
        except ValueError:
            raise ValueError(f"{env} must be a number of images or 'never', got {value!r}") from None
        if after < 0:
            raise ValueError(f"{env} must be >= 0 images or 'never', got {value!r}")
        return after if device.startswith("cuda") else None
    return DEFAULT_COMPILE_AFTER if device.startswith("cuda") else None


def repeated_blocks(model: Any) -> list[Any]:
    """The blocks of each stack of at least two modules of one class (vision blocks, decoder layers)."""
    import torch

    blocks: list[Any] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= 2 and len({type(m) for m in module}) == 1:
            blocks.extend(module)
    return blocks


class CompiledBlocks:
    """Counts the images encoded; past ``after``, installs each block's compiled call around image forward passes."""

    def __init__(self, model: Any, after: int | None) -> None:
        self.after = after
        self.images = 0
        self.broken = False
        self._model = model
        self._calls: list[tuple[Any, Any]] | None = None

    @property
    def active(self) -> bool:
        """True once the blocks are compiled (and have not failed)."""
        return self._calls is not None and not self.broken

    @contextlib.contextmanager
    def around(self, images: int) -> Iterator[bool]:
        """Around one forward pass of ``images`` images (0 for queries): yields whether the compiled blocks run."""
        if images and self.after is not None and not self.broken:
            self.images += images
            if self._calls is None and self.images > self.after:
                try:
                    self._build()
                except Exception as exc:  # no compiler here (torch without triton, say)
                    self.failed(exc)
        if not images or not self.active:
            yield False
            return
        assert self._calls is not None
        for block, call in self._calls:
            block._compiled_call_impl = call
        try:
            yield True
        finally:
            for block, _ in self._calls:
                block._compiled_call_impl = None

    def failed(self, exc: BaseException) -> None:
        """The compiled blocks raised: keep the model eager from now on."""
        self.broken = True
        logger.warning("compiling the encoder's blocks failed (%s: %s); it stays eager", type(exc).__name__, exc)

    def _build(self) -> None:
        import torch

        blocks = repeated_blocks(self._model)
        logger.info("compiling %d repeated blocks after %d images", len(blocks), self.images)
        self._calls = [(block, torch.compile(block._call_impl)) for block in blocks]
