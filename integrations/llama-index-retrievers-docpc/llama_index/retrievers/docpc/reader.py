"""``DocPCReader``: a LlamaIndex reader yielding one image document per PDF (grid + selected-page text).

Why: users who keep their own vector store (or multimodal index) still want
DocPC's representation of a PDF: K representative pages composed into one
grid image, with the text of those pages. No model is loaded; nothing is
encoded or stored.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from docpc_retrievers import DocPCIndex, IndexSettings, PDFLoadError
from docpc_retrievers.composition import DEFAULT_CELL_SIZE
from docpc_retrievers.sources import discover_pdfs
from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document, ImageDocument

from ._common import EXCLUDED_EMBED_METADATA_KEYS, EXCLUDED_LLM_METADATA_KEYS, IMAGE_MIMETYPE, b64_png, clean_metadata

__all__ = ["DocPCReader"]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


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
        strategy, pages, grid, cell_size, seed: page selection and grid, as in
            :class:`docpc_retrievers.IndexSettings`.
        password: opens encrypted PDFs.
        raise_on_error: raise :class:`docpc_retrievers.PDFLoadError` instead of skipping.
    """

    def __init__(
        self,
        *,
        strategy: str = "first",
        pages: int = 4,
        grid: tuple[int, int] | None = None,
        cell_size: tuple[int, int] = DEFAULT_CELL_SIZE,
        seed: int = 0,
        password: str | None = None,
        raise_on_error: bool = False,
    ) -> None:
        self.settings = IndexSettings(strategy=strategy, pages=pages, grid=grid, cell_size=cell_size, seed=seed)
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
        paths = [file] if isinstance(file, (str, os.PathLike)) else list(file)
        seen: set[str] = set()
        for path in discover_pdfs(paths):
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
                logger.info("skipping %s: same content as a file already read", path)
                continue
            seen.add(doc_id)
            yield ImageDocument(
                id_=doc_id,
                text=text,
                image=b64_png(grid.image),
                image_mimetype=IMAGE_MIMETYPE,
                metadata={**dict(extra_info or {}), **clean_metadata(metadata)},
                excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
                excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
            )
