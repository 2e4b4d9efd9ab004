"""The served store, followed when its folder is deleted or rebuilt: reported while it is gone, reopened once back.

A reader's caches live inside the store folder. Were the server to keep using an index whose folder was deleted, it
would write them into whatever folder ``docpc index`` creates at that path next, and break that run. So every
request first compares the folder's Chroma file with the one opened (a ``stat``): gone, the request is answered 503
with the reason and nothing is written; replaced, the store is opened anew with the encoder already loaded, and the
old index is dropped without closing it (closing saves its caches, into the new folder).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from docpc_retrievers.encoders import Encoder
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.serve.requests import RequestError

__all__ = ["StoreWatch"]

logger = logging.getLogger(__name__)


def _marker(path: str) -> tuple[int, int] | None:
    """The identity of the store's Chroma database file (inode, device) in folder ``path``, None when absent."""
    try:
        st = os.stat(os.path.join(path, "chroma.sqlite3"))
    except OSError:
        return None
    return (st.st_ino, st.st_dev)


class StoreWatch:
    """The live index of a served store; ``reopen(encoder)`` opens the store again (None: a Chroma server's store,
    which has no folder to follow)."""

    def __init__(self, index: DocPCIndex, reopen: Callable[[Encoder], DocPCIndex] | None = None) -> None:
        self._index, self._reopen = index, reopen
        self._path = str(index.path)
        self._chroma = str(index.layout.chroma)
        self._marker = _marker(self._chroma) if reopen is not None else None
        self._lock = threading.Lock()
        self.trouble: str | None = None
        """Why the store cannot be served right now (None: it can)."""

    def current(self) -> DocPCIndex:
        """The index to answer from; RequestError (503) naming the reason while the store is gone or unreadable."""
        if self._reopen is None:
            return self._index
        with self._lock:
            marker = _marker(self._chroma)
            if marker is not None and marker == self._marker:
                self.trouble = None
                return self._index
            if marker is None:
                self.trouble = (f"the store at {self._path} is gone (deleted, or being rebuilt); searches resume "
                                "when it is back")
                raise RequestError(self.trouble, status=503)
            try:
                fresh = self._reopen(self._index.encoder)
            except Exception as exc:  # mid-rebuild, say: try again at the next request
                self.trouble = f"the store at {self._path} was replaced and cannot be opened yet: {exc}"
                raise RequestError(self.trouble, status=503) from None
            logger.warning("the store at %s was replaced; serving the new one", self._path)
            self._index, self._marker, self.trouble = fresh, marker, None  # the old one is dropped, not closed
            return fresh

    def close(self) -> None:
        """Close the index being served, unless its folder is gone or replaced (then closing would write there)."""
        if self._reopen is None or _marker(self._chroma) == self._marker:
            self._index.close()
