"""What document loaders share: PDFs composed as an index would, without a model.

Both loaders (LangChain's ``DocPCLoader``, LlamaIndex's ``DocPCReader``) take a :class:`GridSpec` or its fields,
so the grid's settings and defaults are GridSpec's alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from docpc_retrievers.config import GridSpec
from docpc_retrievers.documents.discovery import discover_pdfs
from docpc_retrievers.documents.represent import RepresentedDocument, represent_pdf
from docpc_retrievers.documents.user_metadata import UserMetadata, resolve_user_metadata
from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.retrievers.arguments import PathLike, path_list
from docpc_retrievers.retrievers.hits import clean_metadata

__all__ = ["compose_pdfs", "grid_spec"]

logger = logging.getLogger(__name__)


def grid_spec(spec: GridSpec | None, fields: dict[str, Any]) -> GridSpec:
    """A loader's grid: ``spec``, or :class:`GridSpec` built from its field keywords (``strategy``, ``pages``,
    ``grid``, ``cell_size``, ``seed``); both at once is a TypeError, an unknown field a TypeError naming it."""
    if spec is not None:
        if fields:
            raise TypeError(f"pass spec= or its fields ({', '.join(sorted(fields))}), not both")
        if not isinstance(spec, GridSpec):
            raise TypeError(f"spec must be a docpc_retrievers.GridSpec, not {type(spec).__name__}")
        return spec
    return GridSpec(**fields)


def compose_pdfs(
    paths: PathLike | Iterable[PathLike],
    spec: GridSpec,
    *,
    password: str | None = None,
    raise_on_error: bool = False,
    metadata: UserMetadata = None,
) -> Iterator[RepresentedDocument]:
    """For document loaders: each readable PDF composed as the index would, lazily, identical files once.

    No model is loaded. Files that cannot be used are logged and skipped
    unless ``raise_on_error``; the yielded metadata is already cleaned and
    carries the user's keys (``metadata`` and ``<name>.pdf.json`` sidecars, checked
    before the first file is read, as an index would store them).
    """
    seen: set[str] = set()
    files = discover_pdfs(path_list(paths))
    user = resolve_user_metadata([f for f in files if f.exists()], metadata)
    for path in files:
        try:
            doc = represent_pdf(path, spec, password=password)
        except PDFLoadError as exc:
            if raise_on_error:
                raise
            logger.warning("skipping %s", exc)
            continue
        if doc.doc_id in seen:
            logger.info("skipping %s: same content as a file already loaded", path)
            continue
        seen.add(doc.doc_id)
        doc.metadata = clean_metadata({**doc.metadata, **user.get(path, {})})
        yield doc
