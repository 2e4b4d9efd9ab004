"""How the server names files: relative to the folder the stored documents share, unless the operator asks for
full paths (``docpc serve --full-paths``), so that whoever can reach the server does not learn this machine's
folder layout, the store's location or the model's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["PathDisplay"]

_INFO_PATHS = ("path", "model_path", "server")
"""Keys of ``docpc info`` that name this machine's folders or the Chroma server's address."""


class PathDisplay:
    """Shows sources relative to the common folder of every stored source (recomputed when the document count
    changes, at most every ``every`` seconds), and takes relative paths back against that folder."""

    def __init__(self, sources: Callable[[], Iterable[str]], count: Callable[[], int], *, full: bool = False,
                 every: float = 30.0) -> None:
        self.full, self._sources, self._count, self._every = full, sources, count, every
        self._base: str | None = None
        self._seen = (-1, 0.0)
        self._lock = threading.Lock()

    def base(self) -> str:
        """The folder every stored source lies under ('' for none)."""
        with self._lock:
            n, when = self._seen
            if self._base is None or (self._count() != n and time.monotonic() - when >= self._every):
                found = [s for s in self._sources() if s]
                try:
                    common = os.path.commonpath(found) if found else ""
                except ValueError:  # relative and absolute mixed
                    common = ""
                self._base = common if not found or len(found) > 1 or not common else os.path.dirname(common)
                self._seen = (self._count(), time.monotonic())
            return self._base

    def shown(self, path: Any) -> Any:
        """``path`` as the server shows it."""
        if self.full or not isinstance(path, str) or not os.path.isabs(path):
            return path
        base = self.base()
        return os.path.relpath(path, base) if base and (path == base or path.startswith(base.rstrip("/") + "/")) \
            else os.path.basename(path)

    def taken(self, path: str) -> str:
        """A path a client sent: a relative one is read against the shared folder (it is what the server showed)."""
        return path if os.path.isabs(path) or self.full else os.path.join(self.base(), path)

    def model(self, model: Any) -> Any:
        """A model as shown: a local folder by its name (this machine's paths stay hidden), a hub id as it is."""
        if self.full or not isinstance(model, str) or not os.path.isabs(model):
            return model
        return os.path.basename(model.rstrip("/"))

    def result(self, hit: dict[str, Any]) -> dict[str, Any]:
        """A result or listing dict with its ``source`` and ``model`` (top level and in ``metadata``) as shown."""
        out = dict(hit)
        if "source" in out:
            out["source"] = self.shown(out["source"])
        if "model" in out:
            out["model"] = self.model(out["model"])
        if isinstance(out.get("metadata"), Mapping):
            meta = dict(out["metadata"])
            if "source" in meta:
                meta["source"] = self.shown(meta["source"])
            if "model" in meta:
                meta["model"] = self.model(meta["model"])
            out["metadata"] = meta
        return out

    def info(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """``docpc info`` without this machine's paths (the model by its name)."""
        if self.full:
            return dict(info)
        out = {k: v for k, v in info.items() if k not in _INFO_PATHS}
        if "model" in out:
            out["model"] = self.model(out["model"])
        return out
