"""How batches reach the model: processed (the next one ahead, on a helper thread), cast, pinned, moved.

The device should never wait for the processor. So batch n+1 is prepared while batch n runs; its floating tensors
are cast to the model's dtype where they were made (half the bytes to copy, and no cast on the caller's thread,
which a pageable copy that changes dtype would do synchronously); CPU tensors are pinned so the copy to a GPU
runs asynchronously. Where the image processor itself runs on the GPU, it runs on a stream of its own, and the
model's stream waits only for that stream's event, not for the whole device.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["feed", "prepared"]

_T = TypeVar("_T")


def prepared(batches: Iterable[list[_T]], process: Callable[[list[_T]], Any], ahead: bool) -> Iterator[Any]:
    """``process(batch)`` for each batch in order; with ``ahead``, the next one is prepared on a helper thread while
    the caller uses the current one. Stopping early prepares at most one batch more.

    ``batches`` may be a stream that blocks (the indexer's queue of rendered images): the helper, not the caller,
    waits for the next batch, so the caller's batch runs on the device while it arrives.
    """
    if not ahead:
        yield from map(process, batches)
        return
    ready: queue.Queue[tuple[str, Any]] = queue.Queue()
    slot = threading.Semaphore(1)  # one batch prepared beyond the one the caller holds
    stop = threading.Event()

    def work() -> None:
        try:
            for batch in batches:
                slot.acquire()
                if stop.is_set():
                    return
                ready.put(("batch", process(batch)))
            ready.put(("end", None))
        except BaseException as exc:  # handed to the caller in order
            ready.put(("error", exc))

    helper = threading.Thread(target=work, name="docpc-prepare", daemon=True)
    helper.start()
    try:
        while True:
            kind, value = ready.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            slot.release()
            yield value
    finally:
        stop.set()
        slot.release()  # a helper waiting for a slot sees the stop


def feed(
    batches: Iterable[list[_T]],
    process: Callable[[list[_T]], Any],
    *,
    device: str,
    dtype: torch.dtype,
    ahead: bool,
    on_span: Callable[[str, float, float], None] | None = None,
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """For each batch in order: what ``process`` returned (its CPU tensors for splitting the output), and the
    model's inputs on ``device`` (floating tensors in ``dtype``). ``on_span("prepare", start, end)`` is told each
    batch's preparation time (``time.perf_counter`` seconds), for an indexing run's timeline."""
    import torch

    cuda = device.startswith("cuda")
    side = torch.cuda.Stream(device=device) if cuda else None

    def prepare(batch: list[_T]) -> tuple[Any, Any]:
        started = time.perf_counter()
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
        if on_span is not None:
            on_span("prepare", started, time.perf_counter())
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
