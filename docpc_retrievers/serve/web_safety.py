"""What stands in front of every route of ``docpc serve`` over HTTP (the MCP endpoint included).

A web page the user visits can make the browser send requests to a server on the user's own machine. So, before
any handler runs: the ``Host`` header must name the bound address (or a name the operator allowed), which defeats
DNS rebinding whatever loopback address is bound; a request carrying an ``Origin`` is refused unless that origin was
allowed; a POST must say ``Content-Type: application/json``, which no cross-site "simple" request can; the token,
when there is one, is checked (the ``Bearer`` scheme in any case); bodies over the limit are refused before they are
read; unknown routes and methods, and anything that fails inside, answer JSON.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Iterable, Mapping

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docpc_retrievers.serve.requests import LIMITS

__all__ = ["WebSafety", "allowed_hosts"]

logger = logging.getLogger(__name__)


class _TooLarge(Exception):
    pass


def allowed_hosts(host: str, port: int, loopback: bool, extra: Iterable[str] = ()) -> set[str] | None:
    """The ``Host`` values a request may carry: the bound address (with and without its port), ``localhost`` when
    bound to 127.0.0.1 or ::1, and the operator's ``extra`` names; None (any) for an address other machines reach
    when the operator named none (the token guards it; their names for this machine are not known here)."""
    extra = [h.lower() for h in extra]
    if not loopback and not extra:
        return None
    shown = f"[{host}]" if ":" in host else host
    names = {shown.lower(), *extra}
    if host in ("127.0.0.1", "::1"):
        names.add("localhost")
    return names | {f"{n}:{port}" for n in names}


def _json(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


class WebSafety:
    """ASGI middleware: host, origin, token, route, content type and size checks, JSON errors (module docstring)."""

    def __init__(self, app: ASGIApp, *, routes: Mapping[str, Iterable[str]], hosts: set[str] | None,
                 origins: Iterable[str] = (), token: str | None = None) -> None:
        self.app, self.hosts, self.token = app, hosts, token
        self.origins = {o.rstrip("/").lower() for o in origins}
        self.routes = [(re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", path) + "$"), {m.upper() for m in methods})
                       for path, methods in routes.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        seen = 0

        async def receiving() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > LIMITS.body_bytes:
                raise _TooLarge
            return message

        try:
            await self.app(scope, receiving, sending)
        except _TooLarge:
            if not started:
                await _json(413, f"the body is larger than {LIMITS.body_bytes:,} bytes")(scope, receive, send)
        except Exception:  # a bug must still answer JSON, and leave a trace for the operator
            logger.exception("request %s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await _json(500, "the server failed on this request (see its log)")(scope, receive, send)

    def _refusal(self, scope: Scope) -> JSONResponse | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        if self.hosts is not None and headers.get("host", "").lower() not in self.hosts:
            return _json(421, f"this server does not answer for host {headers.get('host', '')!r} (allowed: "
                              f"{', '.join(sorted(self.hosts))}; docpc serve --allow-host adds names)")
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self.origins:
            return _json(403, f"requests from web pages at {origin} are refused (docpc serve --allow-origin allows "
                              "an origin)")
        if self.token is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return _json(401, "missing or wrong token (send Authorization: Bearer TOKEN)",
                             {"WWW-Authenticate": "Bearer"})
        path, method = scope.get("path", ""), scope.get("method", "GET").upper()
        methods = next((m for pattern, m in self.routes if pattern.match(path)), None)
        if methods is None:
            return _json(404, f"no route {path} (routes: /search, /explain, /documents, /info, /health, /mcp)")
        if method not in methods:
            return _json(405, f"{path} takes {', '.join(sorted(methods))}, not {method}",
                         {"Allow": ", ".join(sorted(methods))})
        if method == "POST" and headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _json(415, "send the body as JSON with Content-Type: application/json")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > LIMITS.body_bytes:
            return _json(413, f"the body is larger than {LIMITS.body_bytes:,} bytes")
        return None

