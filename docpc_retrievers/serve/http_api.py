"""The server's HTTP JSON API (schema in docs/serve.md) and the bearer-token check in front of every request.

Routes: ``POST /search``, ``POST /explain``, ``GET /documents``, ``GET /documents/{id}``, ``GET /info``,
``GET /health``. Errors answer ``{"error": message}`` with 400 (bad request), 401 (token), 404 (unknown id).
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from docpc_retrievers.config import DEFAULT_TOP_K
from docpc_retrievers.errors import DocPCError
from docpc_retrievers.serve.service import PageImage, ServiceError, StoreService

__all__ = ["TokenCheck", "json_routes"]

_T = TypeVar("_T")
Handler = Callable[[Request], Awaitable[Response]]


class TokenCheck:
    """ASGI middleware: every HTTP request (the MCP endpoint included) must carry ``Authorization: Bearer TOKEN``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self._expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                response = JSONResponse({"error": "missing or wrong token (send Authorization: Bearer TOKEN)"},
                                        status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _answer(call: Callable[[], _T]) -> _T | JSONResponse:
    """``call()`` on a worker thread (requests overlap); the client's mistakes become 4xx answers."""
    try:
        return await anyio.to_thread.run_sync(call)
    except ServiceError as exc:
        return _error(str(exc), exc.status)
    except (DocPCError, ValueError, TypeError) as exc:
        return _error(str(exc), 400)


async def _json(call: Callable[[], Any]) -> JSONResponse:
    """``call()``'s answer as JSON, or the 4xx that :func:`_answer` made of the client's mistake."""
    found = await _answer(call)
    return found if isinstance(found, JSONResponse) else JSONResponse(found)


async def _body(request: Request) -> dict[str, Any] | JSONResponse:
    try:
        body = json.loads(await request.body() or b"{}")
    except json.JSONDecodeError as exc:
        return _error(f"the body is not JSON: {exc}", 400)
    return body if isinstance(body, dict) else _error("the body must be a JSON object", 400)


def _pictures(pictures: list[PageImage]) -> list[dict[str, Any]]:
    return [{"id": p.doc_id, "page": p.page, "caption": p.caption, "png_base64": base64.b64encode(p.png).decode()}
            for p in pictures]


def json_routes(service: StoreService, model: str) -> list[tuple[str, list[str], Handler]]:
    """``(path, methods, handler)`` for each route of the JSON API."""

    async def search(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        unknown = set(body) - {"query", "k", "filters", "under", "rerank", "images"}
        if unknown:
            return _error(f"unknown field(s): {', '.join(sorted(unknown))}", 400)
        found = await _answer(partial(service.search, body.get("query", ""), body.get("k", DEFAULT_TOP_K),
                                      filters=body.get("filters"), under=body.get("under"),
                                      rerank=bool(body.get("rerank", False)), images=body.get("images", 0)))
        if isinstance(found, JSONResponse):
            return found
        results, pictures = found
        return JSONResponse({"query": body["query"], "results": results, "images": _pictures(pictures)})

    async def explain(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        found = await _answer(partial(service.explain, body.get("query", ""), body.get("id", "")))
        if isinstance(found, JSONResponse):
            return found
        summary, pictures = found
        return JSONResponse({**summary, "images": _pictures(pictures)})

    async def documents(request: Request) -> Response:
        q = request.query_params
        try:
            where = json.loads(q["where"]) if q.get("where") else None
            limit, offset = int(q.get("limit", 100)), int(q.get("offset", 0))
        except (ValueError, json.JSONDecodeError) as exc:
            return _error(f"bad query parameter: {exc}", 400)
        return await _json(partial(service.documents, where, limit=limit, offset=offset))

    async def document(request: Request) -> Response:
        return await _json(partial(service.document, request.path_params["doc_id"]))

    async def info(request: Request) -> Response:
        return await _json(service.info)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": model, "documents": len(service.index)})

    return [
        ("/search", ["POST"], search),
        ("/explain", ["POST"], explain),
        ("/documents", ["GET"], documents),
        ("/documents/{doc_id}", ["GET"], document),
        ("/info", ["GET"], info),
        ("/health", ["GET"], health),
    ]
