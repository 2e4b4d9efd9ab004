"""Search over the store's vectors: backends behind a small interface (backend.py), one configuration (config.py)."""

from docpc_retrievers.store.search.backend import Scored, SearchBackend, SummaryCodes, VectorSource
from docpc_retrievers.store.search.centroid_search import CentroidSearch
from docpc_retrievers.store.search.centroids import CentroidIndex, document_centroids
from docpc_retrievers.store.search.config import BACKENDS, SearchConfig
from docpc_retrievers.store.search.exact import exact_scores
from docpc_retrievers.store.search.scan import ExactScan

__all__ = ["BACKENDS", "CentroidIndex", "CentroidSearch", "ExactScan", "Scored", "SearchBackend", "SearchConfig", "SummaryCodes",
           "VectorSource", "backend_for", "document_centroids", "exact_scores"]


def backend_for(kind: str, source: VectorSource, *, dim: int, config: SearchConfig | None = None) -> SearchBackend:
    """A new, empty backend of ``kind`` (one of :data:`BACKENDS`) reading rows from ``source``."""
    config = (config or SearchConfig()).with_options(backend=kind)
    return {"centroids": CentroidSearch, "scan": ExactScan}[kind](source, dim, config)
