"""Encoding in a process of its own, so nothing else in the indexing process holds up the device.

On a GPU the encoding thread spends its time launching kernels, which needs Python's lock; in the indexing
process that lock is also held by Chroma's embedded writes (for the whole of each write), by the loop taking
rendered documents and by pooling. On an H200 the forward passes ran at 27.6 images a second of forward time
inside an indexing run against 40.2 encoding alone. An :class:`EncoderProcess` runs the same
:class:`~docpc_retrievers.encoders.stream.EncodeStream` in a fresh interpreter that does nothing else: images go
to it as pixel files in shared memory (``pixel_files.py``), its results (float32 vectors, about 0.4 MB a grid),
spans and warnings come back through a pipe. It has the stream's interface, so the indexer drives either.
The child is a ``python -c`` interpreter, as render workers are, so a user's script without a ``__main__``
guard is never run twice.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import signal
import subprocess
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from PIL import Image

from docpc_retrievers.child_process import describe_exit, start_child
from docpc_retrievers.encoders.loader import EncoderRecipe
from docpc_retrievers.encoders.protocol import EncodedImage, Encoder
from docpc_retrievers.encoders.stream import EncodeStream, Span
from docpc_retrievers.errors import EncodingProcessError
from docpc_retrievers.pixel_files import (
    read_images, remove_files, remove_orphans, spool_dir, unlink_quietly, write_images,
)

__all__ = ["EncoderProcess", "RemoteEncoder", "serve"]

logger = logging.getLogger(__name__)

_numbers = itertools.count()


class RemoteEncoder:
    """The encoder as the indexing process sees it when it runs elsewhere: what it is (its id, its settings, the
    size of its vectors and batches), for recording in the store and checking against it; it encodes nothing."""

    def __init__(self, model_id: str, dim: int, batch_size: int, settings: dict[str, Any], description: str) -> None:
        self.model_id = model_id
        self.dim = dim
        self.batch_size = batch_size
        self._settings = settings
        self.description = description

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def _elsewhere(self, *args: Any, **kwargs: Any) -> Any:
        raise EncodingProcessError(f"{self.description} runs in the indexing run's encoding process; load the "
                                   "encoder in this process to encode here")

    encode_images = encode_queries = encode_images_with_info = _elsewhere

    def __repr__(self) -> str:
        return f"RemoteEncoder({self.description})"


class EncoderProcess:
    """Encodes submitted image chunks in order in a child process, calling each chunk's ``done`` (on a thread of
    this process that reads the child's answers), as :class:`EncodeStream` does on its thread.

    ``recipe`` says what to load there; ``check`` sees the child's encoder (a :class:`RemoteEncoder`) once it has
    loaded and may refuse it (a store built with another model). ``depth`` chunks may wait in the child besides
    the one being encoded; :meth:`submit` blocks beyond that, which bounds the pixels held in shared memory.
    """

    background = True

    def __init__(self, recipe: EncoderRecipe, *, depth: int = 4, check: Callable[[Encoder], None] | None = None,
                 on_span: Span | None = None) -> None:
        self._told = on_span
        self._check = check
        self._limit = max(1, depth) + 2
        self.spool_full = False
        """Whether a chunk's pixels found no room in the spool and went through the pipe instead."""
        self.busy_s = 0.0
        """Seconds the child spent preparing and forwarding batches (summed: preparation overlaps forwards)."""
        self._spool = spool_dir(fallback=True) or "."
        remove_orphans(self._spool)  # an earlier run killed with chunks in flight (it may have had no render pool)
        self._prefix = f"docpc-encode-{os.getpid()}-{next(_numbers)}-"  # the owner's pid first: orphans are found
        self._cond = threading.Condition()
        self._done: dict[int, Callable[[list[EncodedImage]], None]] = {}
        self._submitted = 0
        self._finished = 0
        self._drained = 0
        self._error: BaseException | None = None
        self._encoder: RemoteEncoder | None = None
        self._closing = False
        self._process, self._sender, self._conn = start_child("docpc_retrievers.encoders.process", "serve")
        self._sender.send((recipe, depth))
        self._reader: threading.Thread | None = threading.Thread(target=self._read, name="docpc-encode-reader",
                                                                 daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ the indexer's side
    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._process.pid

    @property
    def encoder(self) -> RemoteEncoder:
        """The child's encoder, once loaded and checked (waits for it; raises its load error or the refusal)."""
        with self._cond:  # no time limit: a first run may be downloading the model (a child that dies is told)
            while self._encoder is None and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            assert self._encoder is not None
            return self._encoder

    @property
    def waiting(self) -> int:
        """Chunks submitted and not yet encoded (the timeline's queue depth)."""
        with self._cond:
            return self._submitted - self._finished

    def submit(self, images: Sequence[Image.Image], done: Callable[[list[EncodedImage]], None]) -> None:
        """Encode ``images`` after everything submitted before; ``done(results)`` gets them in input order."""
        with self._cond:
            while self._submitted - self._finished >= self._limit and self._error is None:
                self._cond.wait(timeout=1.0)
            if self._error is not None:
                raise self._error
            number = self._submitted
            self._submitted += 1
            self._done[number] = done
        path: str | None = os.path.join(self._spool, f"{self._prefix}{number}.raw")
        try:
            pixels: Any = write_images(images, path)  # type: ignore[arg-type]
        except OSError:  # a full or missing spool (a container's /dev/shm is 64 MB by default): through the pipe
            if not self.spool_full:
                logger.info("pixels go to the encoding process through the pipe: %s has no room", self._spool)
            self.spool_full = True
            path, pixels = None, [(image.mode, image.size, image.tobytes()) for image in images]
        try:
            self._sender.send(("encode", number, path, pixels))
        except OSError:
            if path is not None:
                unlink_quietly(path)
            self._raise_if_failed()
            raise self._gone() from None

    def drain(self) -> None:
        """Encode what is waiting, even less than a batch, and wait until every ``done`` has run; raise the
        child's error, if any."""
        self._raise_if_failed()
        with self._cond:
            asked = self._drained + 1
        try:
            self._sender.send(("flush",))
        except OSError:
            self._raise_if_failed()
            raise self._gone() from None
        with self._cond:
            while self._drained < asked and self._error is None:
                self._cond.wait()
        self._raise_if_failed()

    def close(self) -> None:
        """Stop the child after the batch in flight (chunks still waiting are dropped) and remove their pixels."""
        if self._reader is None:
            return
        with self._cond:
            self._closing = True
        try:
            self._sender.send(None)
        except OSError:
            pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._reader.join(timeout=10)
        self._reader = None
        self._sender.close()
        self._conn.close()
        remove_files(self._prefix, self._spool)

    def __enter__(self) -> EncoderProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _raise_if_failed(self) -> None:
        with self._cond:
            if self._error is not None:
                raise self._error

    def _gone(self) -> EncodingProcessError:
        how = describe_exit(self._process, wait=2.0)  # a child whose pipe broke is ending: its exit names how
        how = "stopped answering" if how == "no exit yet" else f"ended ({how})"
        return EncodingProcessError(f"the encoding process {how}; what was committed stays indexed: run again to "
                                    "go on")

    def _fail(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    # ------------------------------------------------------------------ the reader thread
    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                with self._cond:
                    closing = self._closing
                if not closing:
                    self._fail(self._gone())
                return
            except BaseException as exc:  # an answer that cannot be read: the run must not wait for it
                self._fail(EncodingProcessError(f"an answer of the encoding process could not be read: {exc}"))
                return
            try:
                self._handle(message)
            except BaseException as exc:  # a ``done`` or the check failed: the run stops at its next call
                self._fail(exc)

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "done":
            _, number, items = message
            with self._cond:
                done = self._done.pop(number)
            try:
                done([EncodedImage(embeddings, mask, grid) for embeddings, mask, grid in items])
            finally:
                with self._cond:
                    self._finished += 1
                    self._cond.notify_all()
        elif kind == "span":
            _, stage, start, end = message
            if stage in ("prepare", "forward"):
                self.busy_s += end - start
            if self._told is not None:
                self._told(stage, start, end)
        elif kind == "log":
            _, level, name, text = message
            logging.getLogger(name).log(level, "%s", text)
        elif kind == "ready":
            encoder = RemoteEncoder(**message[1])
            if self._check is not None:
                self._check(encoder)
            with self._cond:
                self._encoder = encoder
                self._cond.notify_all()
        elif kind == "drained":
            with self._cond:
                self._drained += 1
                self._cond.notify_all()
        elif kind == "error":
            self._fail(_restored(*message[1:]))


def _portable(exc: BaseException) -> tuple[bytes | None, str, str]:
    """An error as the child sends it: pickled where it can be, its text and its traceback either way."""
    text = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        data: bytes | None = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - any error that does not survive the trip is sent as text
        data = None
    return data, text, trace


def _restored(data: bytes | None, text: str, trace: str) -> BaseException:
    """The child's error, raised here as itself where it could be sent, else as an EncodingProcessError."""
    logger.debug("the encoding process failed:\n%s", trace)
    if data is not None:
        try:
            exc = pickle.loads(data)
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # noqa: BLE001
            pass
    return EncodingProcessError(f"the encoding process failed: {text}")


# ---------------------------------------------------------------------- the child's side


class _Sender:
    """The child's one way back, shared by its threads."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._conn.send(message)


class _Forward(logging.Handler):
    """Sends the child's warnings and errors to the indexing process, whose handlers and filters show them."""

    def __init__(self, out: _Sender) -> None:
        super().__init__(logging.WARNING)
        self._out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._out.send(("log", record.levelno, record.name, record.getMessage()))
        except Exception:  # noqa: BLE001 - the pipe is gone: nothing to tell
            pass


def _describe(encoder: Encoder) -> dict[str, Any]:
    return {"model_id": encoder.model_id, "dim": int(encoder.dim),
            "batch_size": int(getattr(encoder, "batch_size", 1) or 1), "settings": encoder.settings(),
            "description": repr(encoder)}


def _results(encoded: list[EncodedImage]) -> list[tuple[np.ndarray, np.ndarray, tuple[int, int] | None]]:
    return [(item.embeddings, item.visual_mask, item.patch_grid) for item in encoded]


def serve(read_fd: int, write_fd: int) -> None:
    """What the child runs: load the recipe's encoder, then encode the chunks it is sent until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the indexing process's to handle
    conn_in = Connection(read_fd, writable=False)
    out = _Sender(Connection(write_fd, readable=False))
    root = logging.getLogger()
    root.addHandler(_Forward(out))
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    try:
        recipe, depth = conn_in.recv()
    except (EOFError, OSError):
        return

    def on_error(exc: BaseException) -> None:
        out.send(("error", *_portable(exc)))

    stream = EncodeStream(recipe.load, depth=depth, on_span=lambda stage, a, b: out.send(("span", stage, a, b)),
                          on_error=on_error)
    try:
        try:
            encoder = stream.encoder
        except BaseException:  # told through on_error already
            return
        out.send(("ready", _describe(encoder)))
        _serve_chunks(conn_in, out, stream)
    finally:
        stream.close()


def _serve_chunks(conn_in: Connection, out: _Sender, stream: EncodeStream) -> None:
    while True:
        try:
            message = conn_in.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        try:
            if message[0] == "encode":
                _, number, path, pixels = message
                if path is None:  # sent through the pipe: ``(mode, size, bytes)`` each
                    images = [Image.frombytes(mode, size, data) for mode, size, data in pixels]
                else:
                    images = read_images(path, pixels)
                stream.submit(images, lambda encoded, n=number: out.send(("done", n, _results(encoded))))
            elif message[0] == "flush":
                stream.drain()
                out.send(("drained",))
        except BaseException as exc:  # the stream's own errors were told already, as they happened
            if exc is not stream.error:
                out.send(("error", *_portable(exc)))
            return
