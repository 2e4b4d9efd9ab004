"""One PDF -> what gets encoded: selected pages rendered, composed into a grid (or kept as pages), described.

The index, the document loaders of both frameworks, training and the BM25
baselines all build a document through :func:`represent_pdf`, so a grid
looks the same wherever it is made.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from PIL import Image

from docpc_retrievers.config import DEFAULT_MAX_FILE_BYTES, GridSpec, IndexSettings
from docpc_retrievers.documents.composition import ComposedGrid, compose_grid
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.documents.selection import select_document_pages
from docpc_retrievers.errors import PDFLoadError

__all__ = ["RepresentedDocument", "checked_source", "compose_pdf", "render_source_pages", "represent_pdf"]


@dataclass
class RepresentedDocument:
    """A PDF made ready for encoding.

    ``grid`` is the composed grid (grid mode) and ``pages`` the rendered
    selected pages (page mode; empty in grid mode). ``metadata`` has the keys
    stored for every document, less those only the encoder knows (``model``,
    ``token_grid``); ``text`` is the text layer of the selected pages.
    """

    doc_id: str
    path: Path
    grid: ComposedGrid | None
    metadata: dict[str, Any]
    text: str
    page_texts: list[str] = field(default_factory=list)
    pages: list[Image.Image] = field(default_factory=list)

    @property
    def images(self) -> list[Image.Image]:
        """What gets encoded: the grid (grid mode) or each page (page mode)."""
        return [self.grid.image] if self.grid is not None else self.pages


def represent_pdf(
    path: str | os.PathLike[str],
    settings: IndexSettings | GridSpec | None = None,
    *,
    password: str | None = None,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    doc_id: str | None = None,
) -> RepresentedDocument:
    """Open a PDF, select and render its pages, compose the grid (grid mode) and describe it.

    ``doc_id`` skips hashing the file when the caller already did. Raises
    :class:`PDFLoadError` (with the file and a stable ``kind``) for a file that cannot be used.
    """
    s = _index_settings(settings)
    file_path = Path(path).expanduser().resolve()
    if doc_id is None:
        try:
            doc_id = document_id(file_path)
        except OSError as exc:
            raise PDFLoadError(file_path, "not_found", f"file cannot be read: {exc}") from None
    with open_pdf(file_path, password=password, max_file_bytes=max_file_bytes) as doc:
        info = doc.info()
        if s.pages is None:
            selected = list(range(doc.page_count))
        else:
            selected = select_document_pages(doc, s.pages, s.strategy, seed=s.seed)
        images = doc.render(selected, fit=s.cell_size if s.mode == "grid" else s.page_size)
        texts = doc.text(selected)
        labels = info.page_labels
    grid = compose_grid(images, selected, shape=s.shape, cell_size=s.cell_size) if s.mode == "grid" else None
    if grid is None and s.page_canvas:  # a 1x1 grid: the page centred on a page_size canvas
        images = [compose_grid([img], [i], shape=(1, 1), cell_size=s.page_size).image for img, i in zip(images, selected)]
    stat = file_path.stat()
    metadata: dict[str, Any] = {
        "source": str(file_path),
        "file_name": file_path.name,
        "title": info.title,
        "author": info.author,
        "total_pages": info.page_count,
        "selected_pages": [i + 1 for i in selected],
        "selected_labels": [labels[i] for i in selected],
        "mode": s.mode,
        "strategy": s.strategy,
        "k": s.pages,
        "layout": json.dumps(grid.layout.to_dict(), separators=(",", ":")) if grid is not None else None,
        "file_bytes": stat.st_size,
        "file_mtime": stat.st_mtime,
        "indexed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    text = "\n\n".join(t.strip() for t in texts if t and t.strip())
    return RepresentedDocument(
        doc_id, file_path, grid, metadata, text, page_texts=list(texts), pages=[] if grid is not None else images
    )


def compose_pdf(
    path: str | os.PathLike[str],
    *,
    settings: IndexSettings | GridSpec | None = None,
    password: str | None = None,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> tuple[str, ComposedGrid, dict[str, Any], str]:
    """One PDF's grid as the index makes it, not encoded or stored: ``(document id, grid, metadata, text)``.

    Needs grid-mode settings; raises :class:`PDFLoadError` for a file that cannot be used.
    """
    s = _index_settings(settings)
    if s.mode != "grid" or s.pages is None:
        raise ValueError("compose_pdf composes grids: it needs grid mode settings with a page count K")
    doc = represent_pdf(path, s, password=password, max_file_bytes=max_file_bytes)
    assert doc.grid is not None
    return doc.doc_id, doc.grid, doc.metadata, doc.text


def _index_settings(settings: IndexSettings | GridSpec | None) -> IndexSettings:
    if settings is None:
        return IndexSettings()
    if isinstance(settings, GridSpec):
        return IndexSettings(settings.strategy, settings.pages, settings.grid, settings.cell_size, settings.seed)
    return settings


def checked_source(doc_id: str, metadata: Mapping[str, Any]) -> Path:
    """The source PDF of an indexed document, checked to hold the bytes that were indexed.

    When its size or mtime changed, its content hash is compared: a different
    file raises :class:`PDFLoadError` (``changed``), a missing one ``not_found``.
    """
    source = Path(str(metadata.get("source")))
    try:
        stat = source.stat()
    except OSError as exc:
        raise PDFLoadError(
            source,
            "not_found",
            f"the source PDF of indexed document {doc_id} cannot be read ({exc}); restore it or re-index",
        ) from None
    recorded = metadata.get("file_mtime")
    # Chroma keeps about 16 significant digits of a float: compare to the microsecond, not bit for bit
    same_time = isinstance(recorded, (int, float)) and abs(stat.st_mtime - recorded) < 1e-5
    unchanged = stat.st_size == metadata.get("file_bytes") and same_time
    if not unchanged and document_id(source) != doc_id:
        raise PDFLoadError(
            source, "changed", f"the file changed since it was indexed as {doc_id}; re-index it to see its current pages"
        )
    return source


def render_source_pages(
    doc_id: str,
    metadata: Mapping[str, Any],
    *,
    dpi: float | None = None,
    password: str | None = None,
    pages: Sequence[int] | None = None,
) -> list[tuple[int, Image.Image, str]]:
    """Render an indexed document's selected pages (or ``pages`` of them) from its source: ``(number, image, text)``.

    Page numbers are 1-based, in grid order; see :func:`checked_source` for the checks on the source.
    """
    source = checked_source(doc_id, metadata)
    numbers = [int(p) for p in metadata.get("selected_pages") or []]
    if pages is not None:
        wanted = set(pages)
        numbers = [n for n in numbers if n in wanted]
    indices = [n - 1 for n in numbers]
    with open_pdf(source, password=password) as doc:
        images = doc.render(indices, dpi=dpi)
        texts = doc.text(indices)
    return list(zip(numbers, images, texts))
