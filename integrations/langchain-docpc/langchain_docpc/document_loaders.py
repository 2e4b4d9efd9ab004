"""``DocPCLoader``: a LangChain loader yielding one ``Document`` per PDF with its composed grid.

Why: users who keep their own vector store still want DocPC's representation
of a PDF: K representative pages composed into one grid image, with the text
of those pages. No model is loaded; nothing is encoded or stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from docpc_retrievers.retrievers import (
    IMAGE_MIME_TYPE,
    GridSpec,
    PathLike,
    UserMetadata,
    b64_png,
    compose_pdfs,
    grid_spec,
    path_list,
)
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
        spec: page selection and grid (:class:`docpc_retrievers.GridSpec`; default First-4 in 2x2), or its
            fields as keywords: ``strategy``, ``pages``, ``grid``, ``cell_size``, ``seed``.
        password: opens encrypted PDFs.
        raise_on_error: raise :class:`docpc_retrievers.PDFLoadError` instead of skipping.
        metadata: your keys, a dict for every file or a callable ``path -> dict``, merged over each
            PDF's ``<name>.pdf.json`` sidecar; checked as an index checks them.
    """

    def __init__(
        self,
        paths: PathLike | Iterable[PathLike],
        spec: GridSpec | None = None,
        *,
        password: str | None = None,
        raise_on_error: bool = False,
        metadata: UserMetadata = None,
        **grid: Any,
    ) -> None:
        self.paths = path_list(paths)
        self.metadata = metadata
        self.settings = grid_spec(spec, grid)
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
