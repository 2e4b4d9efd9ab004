"""Chroma clients for a store: embedded in a folder (a fresh client when the folder was replaced) or a server over
HTTP, held to hosted Chroma's quotas when ``DOCPC_CHROMA_QUOTAS`` asks (chroma_quotas.py), and the errors that say
the server cannot be reached."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.chroma_quotas import QuotaClient, quotas_from_env

__all__ = ["chroma_client", "forget_embedded", "require_collection", "unreachable"]

logger = logging.getLogger(__name__)


def unreachable(exc: BaseException) -> bool:
    """Whether an exception says the database could not be reached (as opposed to a bad request)."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"ConnectError", "ConnectTimeout", "ReadTimeout", "RemoteProtocolError", "ConnectionError",
                         "NetworkError", "TransportError"})


def chroma_client(path: os.PathLike[str] | str | None, host: str | None, port: int, ssl: bool = False,
                  headers: Mapping[str, str] | None = None) -> Any:
    """An HTTP client for ``host``, else a persistent client for ``path`` (a fresh one when the folder was replaced)."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    quotas = quotas_from_env()
    if host is not None:
        try:
            client = chromadb.HttpClient(host=host, port=port, ssl=ssl, headers=dict(headers or {}), settings=settings)
        except Exception as exc:
            if unreachable(exc) or "Could not connect" in str(exc):
                raise StoreError(f"the Chroma server at {host}:{port} cannot be reached ({exc})") from exc
            raise
    else:
        assert path is not None
        _forget_stale_client(str(path))
        client = chromadb.PersistentClient(path=str(path), settings=settings)
        _OPENED[str(path)] = _marker(str(path))
    return client if quotas is None else QuotaClient(client, quotas)


def require_collection(client: Any, name: str, host: str | None) -> None:
    """StoreError unless the server at ``host`` can be reached and holds the collection ``name``."""
    try:
        client.get_collection(name)
    except Exception as exc:
        if "connect" in f"{type(exc).__name__} {exc}".lower():
            raise StoreError(f"the Chroma server at {host} cannot be reached ({exc})") from exc
        raise StoreError(
            f"no docpc store named {name!r} on the Chroma server {host}; index some documents first"
        ) from exc


_OPENED: dict[str, tuple[int, int]] = {}
_NEVER_A_MARKER = (-2, -2)  # no folder's marker: the next client for the path is made afresh


def _forget_stale_client(path: str) -> None:
    """Chroma keeps one client per path for the life of the process; drop it when the folder was deleted or replaced.

    Why: build a store, delete its folder, build again at the same path in the
    same process, and Chroma would otherwise serve the old records.
    """
    from chromadb.api.client import SharedSystemClient

    if _OPENED.get(path) not in (None, _marker(path)):
        systems = getattr(SharedSystemClient, "_identifier_to_system", {})
        system = systems.pop(path, None)
        if system is not None:
            try:
                system.stop()
            except Exception:  # pragma: no cover - best effort on a client whose files are gone
                logger.debug("stopping a stale Chroma client failed", exc_info=True)


def forget_embedded(path: os.PathLike[str] | str) -> None:
    """Make this process's next embedded client for ``path`` a fresh one: another process (a child ``chroma run``)
    writes the folder meanwhile, and Chroma's client for a path keeps what it read in memory."""
    _OPENED[str(path)] = _NEVER_A_MARKER


def _marker(path: str) -> tuple[int, int]:
    try:
        st = os.stat(os.path.join(path, "chroma.sqlite3"))
    except OSError:
        return (-1, -1)
    return (st.st_ino, st.st_dev)

