"""Encoding on a thread of its own: the indexer hands over rendered images and goes on; the device does not wait.

Encoding inside the indexing loop left the device idle whenever the loop was doing anything else (taking the
next documents from the render workers, checking them against the store, handing out commits), and every call
prepared its first batch with nothing running. An :class:`EncodeStream` loads the model on its thread as soon as
it is made (the indexer makes it when the first document is planned, so loading overlaps rendering), then encodes
what it is given in order: chunks smaller than the encoder's batch are gathered into one group, and each group is
encoded exactly as one ``encode_images_with_info`` call would encode it (the same batches, the same vectors),
the next batch prepared while one runs, across groups too. Each chunk's ``done`` is called on the stream's thread
with its results, in submission order. ``background=False`` encodes each chunk in the caller's thread instead.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from docpc_retrievers.encoders.protocol import EncodedImage, Encoder

__all__ = ["EncodeStream"]

Span = Callable[[str, float, float], None]

_FLUSH = object()
_STOP = object()


@dataclass
class _Chunk:
    images: list[Image.Image]
    done: Callable[[list[EncodedImage]], None]


class EncodeStream:
    """Encodes submitted image chunks in order on one thread (or inline), calling each chunk's ``done``.

    ``load`` builds (or returns) the encoder; ``depth`` chunks may wait unencoded before :meth:`submit` blocks
    (what bounds the rendered images held in memory). ``on_span(stage, start, end)`` hears ``load``,
    ``prepare``, ``forward`` and ``wait`` (the thread idle for want of images) spans; ``on_error`` hears the
    thread's error as it happens (the caller otherwise meets it at its next call).
    """

    def __init__(self, load: Callable[[], Encoder], *, background: bool = True, depth: int = 4,
                 on_span: Span | None = None, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._load = load
        self.background = background
        self._told = on_span
        self._on_error = on_error
        self.busy_s = 0.0
        """Seconds spent preparing and forwarding batches (summed: preparation overlaps forward passes)."""
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._groups: deque[list[_Chunk]] = deque()  # chunks of each group handed to the encoder, in order
        self._cond = threading.Condition()
        self._submitted = 0
        self._finished = 0
        self._error: BaseException | None = None
        self._encoder: Encoder | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="docpc-encode", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ caller's side
    @property
    def encoder(self) -> Encoder:
        """The encoder, once loaded (waits for the stream's thread to load it; raises its load error)."""
        if not self.background:
            if self._encoder is None:
                self._encoder = self._timed("load", self._load)
            return self._encoder
        with self._cond:
            while self._encoder is None and self._error is None:
                self._cond.wait()
            if self._encoder is None:
                raise self._failure()
            return self._encoder

    def submit(self, images: Sequence[Image.Image], done: Callable[[list[EncodedImage]], None]) -> None:
        """Encode ``images`` after everything submitted before; ``done(results)`` gets them in input order."""
        chunk = _Chunk(list(images), done)
        if not self.background:
            encoder = self.encoder
            done(self._timed("forward", lambda: encoder.encode_images_with_info(chunk.images)))
            return
        self._raise_if_failed()
        with self._cond:
            self._submitted += 1
        self._put(chunk)  # blocks while ``depth`` chunks wait, unless the thread failed meanwhile

    def drain(self) -> None:
        """Encode what is waiting, even less than a batch, and wait until every ``done`` has run; raise the
        thread's error, if any."""
        if not self.background:
            return
        self._raise_if_failed()
        self._put(_FLUSH)
        with self._cond:
            while self._finished < self._submitted and self._error is None:
                self._cond.wait()
        self._raise_if_failed()

    def close(self) -> None:
        """Stop the thread after the batch in flight (chunks still waiting are dropped)."""
        if self._thread is None:
            return
        self._stopping.set()
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass  # the thread sees ``_stopping`` at its next chunk
        self._thread.join()
        self._thread = None

    def __enter__(self) -> EncodeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def error(self) -> BaseException | None:
        """The thread's error, once it failed."""
        with self._cond:
            return self._error

    @property
    def waiting(self) -> int:
        """Chunks submitted and not yet taken by the encoding thread (the timeline's queue depth)."""
        return self._queue.qsize()

    def _put(self, item: object) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                self._raise_if_failed()

    def _failure(self) -> BaseException:
        assert self._error is not None
        return self._error

    def _raise_if_failed(self) -> None:
        with self._cond:
            if self._error is not None:
                raise self._error

    def _timed(self, stage: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return fn()
        finally:
            self._on_span(stage, started, time.perf_counter())

    def _on_span(self, stage: str, start: float, end: float) -> None:
        if stage in ("prepare", "forward"):
            self.busy_s += end - start
        if self._told is not None:
            self._told(stage, start, end)

    # ------------------------------------------------------------------ the stream's thread
    def _run(self) -> None:
        try:
            encoder = self._timed("load", self._load)
            with self._cond:
                self._encoder = encoder
                self._cond.notify_all()
            # The streaming path only where the encoder's own class has it: a wrapper that forwards other attributes
            # (``__getattr__``) but overrides encode_images_with_info keeps its own behaviour.
            stream = getattr(encoder, "encode_image_groups") if hasattr(type(encoder), "encode_image_groups") else None
            groups = self._gather(int(getattr(encoder, "batch_size", 1) or 1))
            results: Iterator[list[EncodedImage]] = (
                stream(groups, on_span=self._on_span) if stream is not None
                else (self._timed("forward", lambda g=g: encoder.encode_images_with_info(g)) for g in groups)
            )
            for encoded in results:
                chunks = self._groups.popleft()
                start = 0
                for chunk in chunks:
                    chunk.done(encoded[start : start + len(chunk.images)])
                    start += len(chunk.images)
                with self._cond:
                    self._finished += len(chunks)
                    self._cond.notify_all()
        except BaseException as exc:  # handed to the caller at its next submit or drain
            with self._cond:
                self._error = exc
                self._cond.notify_all()
            if self._on_error is not None:
                self._on_error(exc)

    def _gather(self, batch_size: int) -> Iterator[list[Image.Image]]:
        """The groups to encode: waiting chunks gathered until they fill a batch (or a drain asks for the rest)."""
        taken: list[_Chunk] = []
        while not self._stopping.is_set():
            started = time.perf_counter()
            item = self._queue.get()
            self._on_span("wait", started, time.perf_counter())
            if item is _STOP or self._stopping.is_set():
                return
            if item is not _FLUSH:
                taken.append(item)
                if sum(len(c.images) for c in taken) < batch_size:
                    continue
            if taken:
                self._groups.append(taken)
                yield [image for chunk in taken for image in chunk.images]
                taken = []
