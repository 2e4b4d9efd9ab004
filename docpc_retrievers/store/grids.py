"""Grid previews: the composed grid of each document, kept as a PNG in the store directory.

Written in the background while the next documents render and encode, and
always on disk before the record that points at them is committed. Ids are
checked before they become file names (see :func:`~docpc_retrievers.store.layout.check_doc_id`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from PIL import Image

from docpc_retrievers.errors import DocumentNotFoundError
from docpc_retrievers.store.layout import StoreLayout

__all__ = ["GridImageStore"]


class GridImageStore:
    """Grid PNGs by document id under ``layout.grids``."""

    def __init__(self, layout: StoreLayout) -> None:
        self.layout = layout
        self._writer: ThreadPoolExecutor | None = None

    def write(self, doc_id: str, image: Image.Image) -> None:
        """Write one grid now (atomically: a reader sees the old file or the new one)."""
        target = self.layout.grid(doc_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{threading.get_ident()}.tmp")
        # Lossless (small text must stay legible) but fast: level 1 is ~1.4x quicker than 6.
        image.save(tmp, format="PNG", compress_level=1)
        os.replace(tmp, target)

    def write_later(self, doc_id: str, image: Image.Image) -> Future[None]:
        """Start writing a grid in a background thread; wait on the future before committing its record."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="docpc-grid")
        return self._writer.submit(self.write, doc_id, image)

    def read_bytes(self, doc_id: str) -> bytes:
        """The PNG bytes exactly as written; :class:`DocumentNotFoundError` when there is none."""
        try:
            return self.layout.grid(doc_id).read_bytes()
        except FileNotFoundError:
            raise DocumentNotFoundError(doc_id, self.layout.root) from None

    def image(self, doc_id: str) -> Image.Image:
        """The grid as an RGB image."""
        path = self.layout.grid(doc_id)
        if not path.exists():
            raise DocumentNotFoundError(doc_id, self.layout.root)
        with Image.open(path) as img:
            return img.convert("RGB")

    def remove(self, ids: Iterable[str]) -> None:
        """Delete the grids of these documents (missing ones are ignored)."""
        for doc_id in ids:
            self.layout.grid(doc_id).unlink(missing_ok=True)

    def total_bytes(self) -> int:
        """Bytes of all grid files."""
        return self.layout.bytes_under(self.layout.grids)

    def close(self) -> None:
        """Wait for background writes to finish."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
