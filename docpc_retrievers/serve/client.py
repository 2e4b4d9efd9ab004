"""Asking a running ``docpc serve`` over its JSON API: what ``docpc search --server URL`` uses."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from docpc_retrievers.config import DEFAULT_TOP_K
from docpc_retrievers.errors import DocPCError

__all__ = ["SERVER_ENV", "TOKEN_ENV", "remote_search"]

SERVER_ENV = "DOCPC_SERVER"
"""Environment variable naming a server for ``docpc search`` (``--server`` wins)."""
TOKEN_ENV = "DOCPC_SERVE_TOKEN"
"""Environment variable holding the server's token, read by ``docpc serve`` and by its clients."""


def remote_search(
    url: str, query: str, k: int = DEFAULT_TOP_K, *, filters: Mapping[str, Any] | None = None,
    under: Sequence[str] | None = None, rerank: bool = False, token: str | None = None, timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """The server's results for ``query`` (the CLI's ``--json`` dicts); DocPCError naming the server on failure."""
    import httpx

    token = token if token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # Paths are the caller's: a relative one is resolved here, where it was typed, not in the server's folder.
    paths = [os.path.abspath(os.path.expanduser(str(p))) for p in under or []]
    body = {"query": query, "k": k, "filters": dict(filters) if filters else None, "under": paths or None,
            "rerank": rerank}
    try:
        response = httpx.post(url.rstrip("/") + "/search", json=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise DocPCError(f"cannot reach the docpc server at {url}: {exc}") from None
    if response.status_code != 200:
        try:
            reason = response.json().get("error", response.text)
        except ValueError:
            reason = response.text
        hint = (f"; give its token with --token or ${TOKEN_ENV}" if response.status_code == 401 and not token
                else f"; check the token given (--token or ${TOKEN_ENV})" if response.status_code == 401 else "")
        raise DocPCError(f"the docpc server at {url} answered {response.status_code}: {reason}{hint}")
    return list(response.json()["results"])
