"""The store as Model Context Protocol tools and resources (the official ``mcp`` SDK's FastMCP).

Tools: ``search`` (results as JSON, then the best pages as images), ``explain`` (the evidence overlay and crops of
one hit), ``list`` and ``info``. Resources: ``docpc://documents/{id}`` (a document's metadata) and
``docpc://documents/{id}/pages/{page}`` (one page as PNG). Every call runs on a worker thread, so calls overlap;
the encoder and the store each serialise their own step (a forward pass, a store search).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ImageContent, TextContent

from docpc_retrievers import __version__
from docpc_retrievers.config import DEFAULT_TOP_K
from docpc_retrievers.errors import DocPCError
from docpc_retrievers.serve.requests import (
    RequestError,
    SearchRequest,
    check_explain,
    check_info,
    check_list,
    check_search,
)
from docpc_retrievers.serve.service import PageImage, StoreService

__all__ = ["build_mcp", "image_blocks"]

_T = TypeVar("_T")

INSTRUCTIONS = (
    "Searches a collection of PDF documents by meaning (docpc: one late-interaction multi-vector per document). "
    "Call `search` with a natural-language query; each result names the document (title, source path, id), its "
    "score (higher is better; compare within one query only) and the pages behind the score; the best pages come "
    "back as images. `explain` shows where one document matched. `list` and `info` describe the collection."
)


async def _in_thread(call: Callable[[], _T]) -> _T:
    """``call()`` on a worker thread; the service's own errors become tool errors the client sees."""
    try:
        return await anyio.to_thread.run_sync(call)
    except DocPCError as exc:
        raise ToolError(str(exc)) from None


def image_blocks(pictures: list[PageImage]) -> list[TextContent | ImageContent]:
    """Each picture as a caption followed by the PNG image."""
    blocks: list[TextContent | ImageContent] = []
    for p in pictures:
        blocks.append(TextContent(type="text", text=p.caption))
        blocks.append(ImageContent(type="image", data=base64.b64encode(p.png).decode("ascii"), mimeType="image/png"))
    return blocks


_CHECKS: dict[str, Callable[[Any], Any]] = {"search": check_search, "explain": check_explain, "list": check_list,
                                             "info": check_info}
"""Each tool's arguments go through the JSON API's checks (serve/requests.py) before the SDK converts them."""
_CHECKED: ContextVar[Any] = ContextVar("docpc_checked_request", default=None)
"""The request :meth:`_CheckedMCP.call_tool` checked, for the tool it calls."""


class _CheckedMCP(FastMCP):
    """FastMCP whose tool calls pass the server's one request check first: the same types, the same unknown-field
    rule and the same messages as the JSON API (the SDK alone would turn ``"5"`` into 5 and drop unknown fields),
    and whose ``resources/list`` names the stored documents (the SDK lists only the templates)."""

    service: StoreService

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        check = _CHECKS.get(name)
        checked = None
        if check is not None:
            try:
                checked = (check_search(arguments or {}, path=self.service.paths.taken) if name == "search"
                           else check(arguments or {}))
            except RequestError as exc:
                raise ToolError(str(exc)) from None
        token = _CHECKED.set(checked)  # the tool answers this checked request: nothing is checked twice
        try:
            return await super().call_tool(name, arguments)
        finally:
            _CHECKED.reset(token)

    async def list_resources(self) -> list[Any]:
        """The stored documents as resources (the first :data:`LISTED_RESOURCES`; ``list`` pages through all)."""
        from mcp.types import Resource

        listed = await anyio.to_thread.run_sync(
            partial(self.service.documents, check_list({"limit": LISTED_RESOURCES})))
        return [*await super().list_resources(),
                *(Resource(uri=f"docpc://documents/{d['id']}", name=str(d.get("title") or d["id"]),
                           description=str(d.get("source") or ""), mimeType="application/json")
                  for d in listed["documents"])]


LISTED_RESOURCES = 1000
"""Documents ``resources/list`` names (the ``list`` tool pages through any number)."""


def build_mcp(service: StoreService, *, host: str = "127.0.0.1", port: int = 8765) -> FastMCP:
    """A FastMCP server whose tools and resources answer from ``service``; stateless over HTTP (any request may
    reach any worker, and no session outlives its request)."""
    mcp = _CheckedMCP("docpc", instructions=INSTRUCTIONS, host=host, port=port, stateless_http=True,
                      json_response=True, log_level="WARNING")
    mcp.service = service
    # FastMCP takes no version; its low-level server would report the MCP SDK's own in `initialize`.
    mcp._mcp_server.version = __version__

    @mcp.tool(name="search", structured_output=False)
    async def search(query: str, k: int = DEFAULT_TOP_K, filters: dict[str, Any] | None = None, under: list[str] | None = None,
                     rerank: bool = False, images: int = 3) -> list[TextContent | ImageContent]:
        """Find the documents that best match a natural-language query.

        Args:
            query: what to look for, in words.
            k: how many documents to return (0-100; 0 returns none).
            filters: a Chroma `where` filter on document metadata, e.g. {"year": {"$gte": 2020}}.
            under: folders (or files) whose documents alone are searched.
            rerank: re-score the top documents from their pages at full resolution (slower, finer).
            images: how many of the top results also return their best page as an image.
        """
        checked = _CHECKED.get()
        if not isinstance(checked, SearchRequest):  # called without the server's call_tool (a direct call in Python)
            checked = check_search({"query": query, "k": k, "filters": filters, "under": under, "rerank": rerank,
                                    "images": images}, path=service.paths.taken)
        results, pictures = await _in_thread(partial(service.search, checked))
        return [TextContent(type="text", text=json.dumps({"query": query, "results": results}, ensure_ascii=False)),
                *image_blocks(pictures)]

    @mcp.tool(name="explain", structured_output=False)
    async def explain(query: str, id: str) -> list[TextContent | ImageContent]:  # noqa: A002  # the tool's argument
        """Show why one document matched a query: each page's share of the score, the grid with the matches as
        heat, and crops of the best pages.

        Args:
            query: the query that found the document.
            id: the document's id, as `search` returned it.
        """
        summary, pictures = await _in_thread(partial(service.explain, check_explain({"query": query, "id": id})))
        return [TextContent(type="text", text=json.dumps(summary, ensure_ascii=False)), *image_blocks(pictures)]

    @mcp.tool(name="list", structured_output=False)
    async def list_documents(where: dict[str, Any] | None = None, limit: int = 50, offset: int = 0) -> str:
        """List the stored documents (id, title, source, total_pages, metadata).

        Args:
            where: a Chroma `where` filter on document metadata.
            limit: how many to return (1-1000).
            offset: how many to skip.
        """
        checked = check_list({"where": where, "limit": limit, "offset": offset})
        listed = await _in_thread(partial(service.documents, checked))
        return json.dumps(listed, ensure_ascii=False)

    @mcp.tool(name="info", structured_output=False)
    async def info() -> str:
        """What the collection holds and how it was built: document count, model, page selection, grid shape."""
        return json.dumps(await _in_thread(service.info), ensure_ascii=False)

    @mcp.resource("docpc://documents/{doc_id}", mime_type="application/json")
    async def document(doc_id: str) -> str:
        """A stored document's metadata."""
        return json.dumps(await _in_thread(partial(service.document, doc_id)), ensure_ascii=False)

    @mcp.resource("docpc://documents/{doc_id}/pages/{page}", mime_type="image/png")
    async def page(doc_id: str, page: str) -> bytes:
        """One selected page of a stored document as PNG (rendered from the source PDF when it is readable)."""
        if not page.isdigit():
            raise ToolError(f"page must be a page number, got {page!r}")
        png = await _in_thread(partial(service.page_image, doc_id, int(page), render=True))
        if png is None:
            raise ToolError(f"no image of page {page} of {doc_id} (not a selected page, or the store keeps no grids)")
        return png

    return mcp
