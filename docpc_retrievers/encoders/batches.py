"""How batches reach the model: processed (the next one ahead, on a helper thread), cast, pinned, moved.

The device should never wait for the processor. So batch n+1 is prepared while batch n runs; its floating tensors
are cast to the model's dtype where they were made (half the bytes to copy, and no cast on the caller's thread,
which a pageable copy that changes dtype would do synchronously); CPU tensors are pinned so the copy to a GPU
runs asynchronously. Where the image processor itself runs on the GPU, it runs on a stream of its own, and the
model's stream waits only for that stream's event, not for the whole device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["feed", "prepared"]

_T = TypeVar("_T")


def prepared(batches: list[list[_T]], process: Callable[[list[_T]], Any], ahead: bool) -> Iterator[Any]:
    """``process(batch)`` for each batch in order; with ``ahead``, the next one is prepared on a helper thread while
    the caller uses the current one. Stopping early prepares at most one batch more."""
    if not ahead or len(batches) < 2:
        yield from map(process, batches)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="docpc-prepare") as helper:
        pending = helper.submit(process, batches[0])
        try:
            for following in [*batches[1:], None]:
                ready = pending.result()
                if following is not None:
                    pending = helper.submit(process, following)
                yield ready
        finally:
            pending.cancel()


def feed(
    batches: list[list[_T]],
    process: Callable[[list[_T]], Any],
    *,
    device: str,
    dtype: torch.dtype,
    ahead: bool,
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """For each batch in order: what ``process`` returned (its CPU tensors for splitting the output), and the
    model's inputs on ``device`` (floating tensors in ``dtype``)."""
    import torch

    cuda = device.startswith("cuda")
    side = torch.cuda.Stream(device=device) if cuda else None

    def prepare(batch: list[_T]) -> tuple[Any, Any]:
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            made = process(batch)
            for key, value in made.items():
                if not isinstance(value, torch.Tensor):
                    continue
                if value.is_floating_point() and value.dtype != dtype:
                    value = value.to(dtype)
                if cuda and value.device.type == "cpu":
                    value = value.pin_memory()
                made[key] = value
            ready = None
            if side is not None:
                ready = torch.cuda.Event()
                ready.record(side)
        return made, ready

    for made, ready in prepared(batches, prepare, ahead):
        if ready is None:
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in made.items()}
        else:
            current = torch.cuda.current_stream(device)
            current.wait_event(ready)
            inputs = {}
            for key, value in made.items():
                if isinstance(value, torch.Tensor):
                    if value.device.type == "cuda":
                        value.record_stream(current)  # made on the side stream, used on this one
                    else:
                        value = value.to(device, non_blocking=True)
                inputs[key] = value
        yield made, inputs
