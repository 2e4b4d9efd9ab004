"""What ``docpc serve`` answers, as plain data: one loaded index shared by every request, whatever the transport.

The MCP tools and the HTTP JSON API are thin layers over :class:`StoreService`, so both answer the same query with
the same results as :meth:`DocPCIndex.search <docpc_retrievers.index.DocPCIndex.search>` in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from PIL import Image

from docpc_retrievers.image_bytes import png_bytes
from docpc_retrievers.errors import DocPCError, PDFLoadError
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.results import SearchResult
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.serve.paths import PathDisplay
from docpc_retrievers.serve.store_watch import StoreWatch
from docpc_retrievers.serve.requests import LIMITS, SERVED, ExplainRequest, ListRequest, RequestError, SearchRequest

__all__ = ["MAX_K", "PageImage", "ServiceError", "StoreService"]

MAX_K = SERVED["k"].server_max
"""Most results one request may ask for."""


ServiceError = RequestError
"""The name 0.3's first builds gave :class:`~docpc_retrievers.serve.requests.RequestError`."""


@dataclass(frozen=True)
class PageImage:
    """One picture in an answer: a hit's best page, an explanation's overlay or crop; PNG bytes."""

    doc_id: str
    page: int | None
    caption: str
    png: bytes


def _png(image: Image.Image, side: int) -> bytes:
    """``image`` as PNG, its longer side at most ``side`` pixels (agents pay per pixel; pages stay readable)."""
    return png_bytes(image.convert("RGB"), max_side=side)


def _json_safe(value: Any) -> Any:
    """``value`` as JSON would carry it (paths and other objects as strings)."""
    return json.loads(json.dumps(value, default=str))


class StoreService:
    """Search, explain and list one store; ``image_side`` bounds every picture's longer side (pixels)."""

    def __init__(self, index: DocPCIndex, *, image_side: int = 1024, full_paths: bool = False,
                 reopen: Callable[[Encoder], DocPCIndex] | None = None) -> None:
        if isinstance(image_side, bool) or not isinstance(image_side, int) or not 32 <= image_side <= 8192:
            raise ValueError(f"image_side must be a number of pixels from 32 to 8192, got {image_side!r}")
        self.watch = StoreWatch(index, reopen)
        self.image_side = image_side
        self.paths = PathDisplay(lambda: (str(d.metadata.get("source") or "") for d in self.index.documents()),
                                 lambda: len(self.index), full=full_paths)

    @property
    def index(self) -> DocPCIndex:
        """The store being served (reopened when its folder was rebuilt; RequestError 503 while it is gone)."""
        return self.watch.current()

    def health(self) -> tuple[dict[str, Any], int]:
        """``/health``'s answer and status: ok with the document count, or unhealthy (503) with the reason."""
        try:
            index = self.index
            return {"status": "ok", "model": self.paths.model(index.encoder.model_id), "documents": len(index)}, 200
        except RequestError as exc:
            return {"status": "unhealthy", "reason": str(exc)}, 503

    def close(self) -> None:
        """Close the store being served (not one whose folder was deleted or replaced meanwhile)."""
        self.watch.close()

    def ready(self) -> str:
        """Load the model now (the server says it is ready only once queries can be encoded); its id."""
        return self.index.encoder.model_id

    # ------------------------------------------------------------------ search

    def search(self, request: SearchRequest) -> tuple[list[dict[str, Any]], list[PageImage]]:
        """The top ``k`` hits as the CLI's ``--json`` dicts, and the best page of the first ``images`` hits (a hit
        whose picture can no longer be read, its document replaced meanwhile, comes without one)."""
        hits = self.search_results(request)
        return ([self.paths.result(h.to_dict()) for h in hits],
                [p for p in (self.best_page(h) for h in hits[: request.images]) if p])

    def search_results(self, request: SearchRequest) -> list[SearchResult]:
        """:meth:`DocPCIndex.search` for a checked request (its query at most ``LIMITS.query_tokens`` tokens)."""
        self.check_tokens(request.query)
        return self.index.search_with([request.query], request.options)[0]

    def check_tokens(self, query: str) -> None:
        """RequestError (413) for a query longer than the limit in the tokens the encoder will see."""
        tokenizer = getattr(getattr(self.index.encoder, "processor", None), "tokenizer", None)
        if tokenizer is None:
            return
        n = len(tokenizer(query, add_special_tokens=False)["input_ids"])
        if n > LIMITS.query_tokens:
            raise RequestError(f"query is {n:,} tokens long for this model; this server takes at most "
                               f"{LIMITS.query_tokens:,}", status=413)

    def best_page(self, hit: SearchResult) -> PageImage | None:
        """The hit's best evidence page cut from its stored grid (None when the store keeps no grids)."""
        pages = [e.page for e in hit.evidence_pages] or hit.selected_pages
        if not pages:
            return None
        page = pages[0]
        try:
            image = self.page_image(hit.id, page)
        except RequestError:  # replaced or deleted since the search answered: the hit stays, without its picture
            return None
        if image is None:
            return None
        return PageImage(hit.id, page, f"page {page} of {hit.title or hit.source or hit.id} (id {hit.id})", image)

    def page_image(self, doc_id: str, page: int, *, render: bool = False) -> bytes | None:
        """Page ``page`` (1-based, one of the selected pages) as PNG: rendered from the source PDF when ``render``
        and readable, else cut from the stored grid; None when neither is there."""
        meta = self._metadata(doc_id)
        if render:
            from docpc_retrievers.documents.represent import render_source_pages

            try:
                rendered = render_source_pages(doc_id, meta, dpi=100, pages=[page])
                if rendered:
                    return _png(rendered[0][1], self.image_side)
            except (PDFLoadError, OSError, ValueError):
                pass
        try:
            layout = self.index.grid_layout(doc_id)
            grid = self.index.grid_image(doc_id)
        except (DocPCError, KeyError, ValueError, OSError):
            return None
        for cell in layout.cells:  # a cell's page_index is the page's 0-based number in the PDF
            if cell.page_index == page - 1 and cell.page_box is not None:
                return _png(grid.crop(cell.page_box), self.image_side)
        return None

    # ------------------------------------------------------------------ explain, list, info

    def explain(self, request: ExplainRequest) -> tuple[dict[str, Any], list[PageImage]]:
        """Why a document matched a query: page shares and where the score went, the overlay and the crops."""
        query, doc_id = request.query, request.id
        self.check_tokens(query)
        self._metadata(doc_id)
        e = self.index.explain(query, doc_id)
        out = {
            "id": e.doc_id, "query": e.query, "score": e.score, "grid_score": e.grid_score, "mode": e.mode,
            "title": e.title, "source": self.paths.shown(e.source),
            "shares": {str(p): round(s, 6) for p, s in e.shares.items()},
            "breakdown": {k: round(v, 6) for k, v in e.breakdown().items()},
            "crops": [{"page": c.page, "label": c.label, "from": c.source, "region": list(c.region)} for c in e.crops],
            "notes": list(e.notes),
        }
        pictures = []
        if e.overlay is not None:
            pictures.append(PageImage(doc_id, None, "the grid with the query's matches as heat", _png(e.overlay, self.image_side)))
        for c in e.crops:
            pictures.append(PageImage(doc_id, c.page, f"page {c.label}: where it matched (from the {c.source})",
                                      _png(c.image, self.image_side)))
        return out, pictures

    def documents(self, request: ListRequest) -> dict[str, Any]:
        """Stored documents (those matching ``where``), ``limit`` from ``offset``, and how many match: the count
        and the page come from one pass over the records, so they agree even while documents are committed."""
        listed = list(self.index.documents(request.where))
        docs = [self.paths.result(_listed(d)) for d in islice(listed, request.offset, request.offset + request.limit)]
        return {"documents": docs, "offset": request.offset, "total": len(listed)}

    def document(self, doc_id: str) -> dict[str, Any]:
        """One document's stored metadata (JSON-safe; the grid's layout and token grid as JSON objects, not as the
        strings the store keeps them in)."""
        meta = dict(self._metadata(doc_id))
        for key in ("layout", "token_grid"):
            if isinstance(meta.get(key), str):
                try:
                    meta[key] = json.loads(meta[key])
                except ValueError:
                    pass
        return _json_safe(self.paths.result({"id": doc_id, **meta}))

    def info(self) -> dict[str, Any]:
        """What the store holds and how it was built (``docpc info``)."""
        return _json_safe(self.paths.info(self.index.info()))

    def _metadata(self, doc_id: str) -> dict[str, Any]:
        if not isinstance(doc_id, str) or not doc_id:
            raise RequestError("give a document id")
        try:
            return self.index.metadata(doc_id)
        except (KeyError, DocPCError):
            raise RequestError(f"no stored document has the id {doc_id!r}", status=404) from None


def _listed(result: SearchResult) -> dict[str, Any]:
    d = result.to_dict()
    for key in ("score", "rank", "evidence_pages"):
        d.pop(key, None)
    return d
