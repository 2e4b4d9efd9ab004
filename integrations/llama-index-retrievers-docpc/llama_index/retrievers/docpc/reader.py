"""``DocPCReader``: a LlamaIndex reader yielding one image document per PDF (grid + selected-page text).

Why: users who keep their own vector store (or multimodal index) still want
DocPC's representation of a PDF: K representative pages composed into one
grid image, with the text of those pages. No model is loaded; nothing is
encoded or stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from docpc_retrievers.retrievers import GridSpec, PathLike, UserMetadata, b64_png, compose_pdfs, grid_spec
from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document, ImageDocument

from ._common import EXCLUDED_EMBED_METADATA_KEYS, EXCLUDED_LLM_METADATA_KEYS, IMAGE_MIMETYPE

__all__ = ["DocPCReader"]



class DocPCReader(BaseReader):
    """Read PDFs (files or folders, recursively) into one ``ImageDocument`` per PDF.

    Each document's id is the DocPC document id (hash of the file's bytes, the
    same id a DocPC index gives it), its text the text layer of the selected
    pages, its image the composed grid (base64 PNG) and its metadata the keys
    a DocPC index stores (source, file_name, title, total_pages,
    selected_pages (1-based), selected_labels, strategy, layout, ...).
    Files that cannot be read are logged and skipped unless ``raise_on_error``.
    Works as a ``SimpleDirectoryReader`` file extractor for ``.pdf``.

    Args:
        spec: page selection and grid (:class:`docpc_retrievers.GridSpec`; default First-4 in 2x2), or its
            fields as keywords: ``strategy``, ``pages``, ``grid``, ``cell_size``, ``seed``.
        password: opens encrypted PDFs.
        raise_on_error: raise :class:`docpc_retrievers.PDFLoadError` instead of skipping.
        metadata: your keys, a dict for every file or a callable ``path -> dict``, merged over each
            PDF's ``<name>.pdf.json`` sidecar; checked as an index checks them.
    """

    def __init__(
        self,
        spec: GridSpec | None = None,
        *,
        password: str | None = None,
        raise_on_error: bool = False,
        metadata: UserMetadata = None,
        **grid: Any,
    ) -> None:
        self.metadata = metadata
        self.settings = grid_spec(spec, grid)
        self.password = password
        self.raise_on_error = raise_on_error

    def lazy_load_data(  # type: ignore[override]
        self,
        file: PathLike | Iterable[PathLike],
        extra_info: Mapping[str, Any] | None = None,
        fs: Any = None,
    ) -> Iterator[Document]:
        """Yield one ``ImageDocument`` per readable PDF under ``file`` (a path, a folder or a list of them).

        ``extra_info`` is merged under each document's metadata (DocPC keys win).
        """
        if fs is not None:
            raise NotImplementedError("DocPCReader reads local files only; fs=... is not supported")
        for doc in compose_pdfs(
            file, self.settings, password=self.password, raise_on_error=self.raise_on_error, metadata=self.metadata
        ):
            assert doc.grid is not None
            yield ImageDocument(
                id_=doc.doc_id,
                text=doc.text,
                image=b64_png(doc.grid.image),
                image_mimetype=IMAGE_MIMETYPE,
                metadata={**dict(extra_info or {}), **doc.metadata},
                excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
                excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
            )
