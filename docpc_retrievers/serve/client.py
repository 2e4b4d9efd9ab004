"""Asking a running ``docpc serve`` over its JSON API: what ``docpc search --server URL`` uses."""

from __future__ import annotations

import os
from typing import Any

from docpc_retrievers.errors import DocPCError

__all__ = ["SERVER_ENV", "TOKEN_ENV", "remote_search"]

SERVER_ENV = "DOCPC_SERVER"
"""Environment variable naming a server for ``docpc search`` (``--server`` wins)."""
TOKEN_ENV = "DOCPC_SERVE_TOKEN"
"""Environment variable holding the server's token, read by ``docpc serve`` and by its clients."""


def remote_search(
    url: str, query: str, *, token: str | None = None, timeout: float = 300.0, **options: Any,
) -> list[dict[str, Any]]:
    """The server's results for ``query`` (the CLI's ``--json`` dicts); DocPCError naming the server on failure.
    ``options``: search options by their core names (``top_k``, ``filters``...), sent under the server's field
    names; one the server does not take is a TypeError naming it."""
    import httpx

    from docpc_retrievers.retrievers.schema import BY_NAME

    token = token if token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    unknown = [name for name in options if name not in BY_NAME or not BY_NAME[name].server]
    if unknown:
        raise TypeError(f"a server request cannot carry {', '.join(unknown)} (its own settings apply)")
    if options.get("under") is not None:  # the caller's paths: resolved here, where they were typed
        under = [options["under"]] if isinstance(options["under"], (str, os.PathLike)) else options["under"]
        options["under"] = [os.path.abspath(os.path.expanduser(str(p))) for p in under]
    body = {"query": query, **{BY_NAME[name].server: value for name, value in options.items()}}
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
