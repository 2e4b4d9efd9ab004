"""Grid previews: each document's composed grid, kept in the store as WebP (lossless for text, q90 for pictures).

The bytes come from :func:`docpc_retrievers.documents.preview.encode_grid`,
made in the render workers while indexing when there are two or more (or
here, in background threads, with one worker or in-process); committed with the document's record, so a
record never exists without its preview.
"""

from __future__ import annotations

import io
from concurrent.futures import Future, ThreadPoolExecutor

from PIL import Image

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.preview import GRID_MIME_TYPE, encode_grid
from docpc_retrievers.documents.represent import represent_pdf
from docpc_retrievers.errors import DocumentNotFoundError, PDFLoadError
from docpc_retrievers.store.multivector import MultiVectorStore

__all__ = ["GRID_MIME_TYPE", "GridImageStore", "encode_grid"]


class GridImageStore:
    """Reads grid previews from the store and encodes new ones off the indexing thread.

    With ``store_grids=False`` no preview is written; one asked for is composed
    again from the source PDF (which must still hold the indexed bytes).
    """

    def __init__(self, store: MultiVectorStore, settings: IndexSettings, *, store_grids: bool = True) -> None:
        self.store = store
        self.settings = settings
        self.store_grids = store_grids
        self._encoder: ThreadPoolExecutor | None = None

    def encode_later(self, image: Image.Image) -> Future[bytes]:
        """Start encoding a grid in a background thread; the future gives its bytes."""
        if self._encoder is None:
            self._encoder = ThreadPoolExecutor(max_workers=2, thread_name_prefix="docpc-grid")
        return self._encoder.submit(encode_grid, image)

    def read_bytes(self, doc_id: str) -> bytes:
        """The preview bytes (WebP): stored, or composed again from the source when none was stored.

        :class:`DocumentNotFoundError` for an unknown document or a page-mode one (no grid).
        """
        try:
            return self.store.grid(doc_id)
        except DocumentNotFoundError:
            found = self.store.get([doc_id])
            if not found or found[0].metadata.get("mode", "grid") != "grid" or self.settings.mode != "grid":
                raise
        source = str(found[0].metadata.get("source"))
        doc = represent_pdf(source, self.settings)
        if doc.doc_id != doc_id or doc.grid is None:
            raise PDFLoadError(source, "changed", f"the file changed since it was indexed as {doc_id}; re-index it")
        return encode_grid(doc.grid.image)

    def image(self, doc_id: str) -> Image.Image:
        """The grid as an RGB image."""
        with Image.open(io.BytesIO(self.read_bytes(doc_id))) as img:
            return img.convert("RGB")

    def close(self) -> None:
        """Wait for background encodes to finish."""
        if self._encoder is not None:
            self._encoder.shutdown(wait=True)
            self._encoder = None
