"""A single-writer lock for a store directory, so a second writer fails clearly instead of corrupting it."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import IO, Any, TypeVar

from docpc_retrievers.errors import StoreLockedError

__all__ = ["WriterLock", "synchronized"]

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])


def synchronized(method: _F) -> _F:
    """Serialise a method on its object's ``_mutex``: one store object may be shared by threads."""

    @wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class WriterLock:
    """An advisory ``flock`` on a store's lock file (``StoreLayout.lock``) held while a writer is open.

    The lock is released by the OS when the process dies, so a killed
    indexing run never leaves a stale lock behind.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        if fcntl is None:  # pragma: no cover
            logger.warning("file locking unavailable on this platform; one writer at a time is not enforced")
        else:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                fh.close()
                raise StoreLockedError(
                    f"store {self.path.parent} is being written by {holder}; "
                    "wait for it to finish (only one writer at a time)"
                ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            if fcntl is not None:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    @property
    def held(self) -> bool:
        return self._fh is not None
