"""The server's HTTP JSON API (schema in docs/serve.md).

Routes: ``POST /search``, ``POST /explain``, ``GET /documents``, ``GET /documents/{id}``, ``GET /info``,
``GET /health``. Arguments are checked by :mod:`docpc_retrievers.serve.requests`, as the MCP tools' are; errors
answer ``{"error": message}`` with 400 (bad request), 404 (unknown id) or 413 (over a limit). What reaches these
handlers has passed :mod:`docpc_retrievers.serve.web_safety` (host, origin, content type, size, token).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from docpc_retrievers.errors import DocPCError
from docpc_retrievers.serve.requests import LIMITS, RequestError, check_explain, check_list, check_search
from docpc_retrievers.serve.service import PageImage, StoreService

__all__ = ["json_routes", "parse_json"]

_T = TypeVar("_T")
Handler = Callable[[Request], Awaitable[Response]]


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def parse_json(data: bytes) -> Any:
    """A request body as JSON, refused (RequestError) when it is not JSON or nests deeper than the limit."""
    try:
        value = json.loads(data or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise RequestError(f"the body nests deeper than {LIMITS.json_depth} levels") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > LIMITS.json_depth:
            raise RequestError(f"the body nests deeper than {LIMITS.json_depth} levels")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return value


async def _answer(call: Callable[[], _T]) -> _T | JSONResponse:
    """``call()`` on a worker thread (requests overlap); the client's mistakes become 4xx answers."""
    try:
        return await anyio.to_thread.run_sync(call)
    except RequestError as exc:
        return _error(str(exc), exc.status)
    except (DocPCError, ValueError, TypeError) as exc:
        return _error(str(exc), 400)


async def _json(call: Callable[[], Any]) -> JSONResponse:
    """``call()``'s answer as JSON, or the 4xx that :func:`_answer` made of the client's mistake."""
    found = await _answer(call)
    return found if isinstance(found, JSONResponse) else JSONResponse(found)


async def _body(request: Request) -> Any:
    return parse_json(await request.body())


def _pictures(pictures: list[PageImage]) -> list[dict[str, Any]]:
    return [{"id": p.doc_id, "page": p.page, "caption": p.caption, "png_base64": base64.b64encode(p.png).decode()}
            for p in pictures]


def json_routes(service: StoreService, model: str) -> list[tuple[str, list[str], Handler]]:
    """``(path, methods, handler)`` for each route of the JSON API."""

    async def search(request: Request) -> Response:
        try:
            checked = check_search(await _body(request), path=service.paths.taken)
        except RequestError as exc:
            return _error(str(exc), exc.status)
        found = await _answer(partial(service.search, checked))
        if isinstance(found, JSONResponse):
            return found
        results, pictures = found
        return JSONResponse({"query": checked.query, "results": results, "images": _pictures(pictures)})

    async def explain(request: Request) -> Response:
        try:
            checked = check_explain(await _body(request))
        except RequestError as exc:
            return _error(str(exc), exc.status)
        found = await _answer(partial(service.explain, checked))
        if isinstance(found, JSONResponse):
            return found
        summary, pictures = found
        return JSONResponse({**summary, "images": _pictures(pictures)})

    async def documents(request: Request) -> Response:
        q = request.query_params
        args: dict[str, Any] = {}
        try:
            if q.get("where"):
                args["where"] = parse_json(q["where"].encode())
            for name in ("limit", "offset"):
                if q.get(name) is not None:
                    args[name] = int(q[name])
            unknown = sorted(set(q) - {"where", "limit", "offset"})
            if unknown:
                raise RequestError(f"unknown query parameter(s): {', '.join(unknown)} (known: where, limit, offset)")
            checked = check_list(args)
        except ValueError as exc:
            return _error(f"bad query parameter: {exc}", 400)
        except RequestError as exc:
            return _error(str(exc), exc.status)
        return await _json(partial(service.documents, checked))

    async def document(request: Request) -> Response:
        return await _json(partial(service.document, request.path_params["doc_id"]))

    async def info(request: Request) -> Response:
        return await _json(service.info)

    async def health(request: Request) -> Response:
        answer, status = await anyio.to_thread.run_sync(service.health)
        return JSONResponse(answer, status_code=status)

    return [
        ("/search", ["POST"], search),
        ("/explain", ["POST"], explain),
        ("/documents", ["GET"], documents),
        ("/documents/{doc_id}", ["GET"], document),
        ("/info", ["GET"], info),
        ("/health", ["GET"], health),
    ]
