"""``DocPCLoader``: a LangChain loader yielding one ``Document`` per PDF with its composed grid.

Why: users who keep their own vector store still want DocPC's representation
of a PDF: K representative pages composed into one grid image, with the text
of those pages. No model is loaded; nothing is encoded or stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from docpc_retrievers.adapters import IMAGE_MIME_TYPE, PathLike, b64_png, compose_pdfs, path_list
from docpc_retrievers.config import GridSpec
from docpc_retrievers.documents.composition import DEFAULT_CELL_SIZE
from docpc_retrievers.documents.user_metadata import UserMetadata
from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document

__all__ = ["DocPCLoader"]


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
        metadata: your keys, a dict for every file or a callable ``path -> dict``, merged over each
            PDF's ``<name>.pdf.json`` sidecar; checked as an index checks them.
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
        metadata: UserMetadata = None,
    ) -> None:
        self.paths = path_list(paths)
        self.metadata = metadata
        self.settings = GridSpec(strategy=strategy, pages=pages, grid=grid, cell_size=cell_size, seed=seed)
        self.password = password
        self.raise_on_error = raise_on_error

    def lazy_load(self) -> Iterator[Document]:
        """Yield one Document per readable PDF, composing each grid only when it is reached."""
        for doc in compose_pdfs(
            self.paths, self.settings, password=self.password, raise_on_error=self.raise_on_error, metadata=self.metadata
        ):
            assert doc.grid is not None
            metadata = {**doc.metadata, "image_base64": b64_png(doc.grid.image), "image_mime_type": IMAGE_MIME_TYPE}
            yield Document(id=doc.doc_id, page_content=doc.text, metadata=metadata)
