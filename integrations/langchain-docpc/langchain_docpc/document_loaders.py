"""``DocPCLoader``: a LangChain loader yielding one ``Document`` per PDF with its composed grid.

Why: users who keep their own vector store still want DocPC's representation
of a PDF: K representative pages composed into one grid image, with the text
of those pages. No model is loaded; nothing is encoded or stored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from docpc_retrievers import DocPCIndex, IndexSettings, PDFLoadError
from docpc_retrievers.composition import DEFAULT_CELL_SIZE
from docpc_retrievers.sources import discover_pdfs
from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document

from ._common import IMAGE_MIME_TYPE, PathLike, b64_png, clean_metadata, path_list

__all__ = ["DocPCLoader"]

logger = logging.getLogger(__name__)


class DocPCLoader(BaseLoader):
    """Load PDFs (files or folders, recursively) as one ``Document`` per PDF.

    ``id`` is the DocPC document id (hash of the file's bytes, the id a DocPC
    index gives it); ``page_content`` the text of the selected pages;
    ``metadata`` the keys a DocPC index stores (``source``, ``file_name``,
    ``title``, ``total_pages``, ``selected_pages`` (1-based),
    ``selected_labels``, ``strategy``, ``layout``, ...) plus the grid as
    ``image_base64`` with ``image_mime_type``. Files that cannot be read are
    logged and skipped unless ``raise_on_error``; identical files load once.

    Args:
        paths: PDF files and folders.
        strategy, pages, grid, cell_size, seed: page selection and grid, as in
            :class:`docpc_retrievers.IndexSettings`.
        password: opens encrypted PDFs.
        raise_on_error: raise :class:`docpc_retrievers.PDFLoadError` instead of skipping.
    """

    def __init__(
        self,
        paths: PathLike | Iterable[PathLike],
        *,
        strategy: str = "first",
        pages: int = 4,
        grid: tuple[int, int] | None = None,
        cell_size: tuple[int, int] = DEFAULT_CELL_SIZE,
        seed: int = 0,
        password: str | None = None,
        raise_on_error: bool = False,
    ) -> None:
        self.paths = path_list(paths)
        self.settings = IndexSettings(strategy=strategy, pages=pages, grid=grid, cell_size=cell_size, seed=seed)
        self.password = password
        self.raise_on_error = raise_on_error

    def lazy_load(self) -> Iterator[Document]:
        """Yield one Document per readable PDF, composing each grid only when it is reached."""
        seen: set[str] = set()
        for path in discover_pdfs(self.paths):
            try:
                doc_id, grid, metadata, text = DocPCIndex.compose_pdf(
                    path, settings=self.settings, password=self.password
                )
            except PDFLoadError as exc:
                if self.raise_on_error:
                    raise
                logger.warning("skipping %s", exc)
                continue
            if doc_id in seen:
                logger.info("skipping %s: same content as a file already loaded", path)
                continue
            seen.add(doc_id)
            metadata = clean_metadata(metadata)
            metadata["image_base64"] = b64_png(grid.image)
            metadata["image_mime_type"] = IMAGE_MIME_TYPE
            yield Document(id=doc_id, page_content=text, metadata=metadata)
