"""Search over the store's vectors: a first stage behind a small interface, exact scoring, and the two together."""

from docpc_retrievers.store.search.base import CandidateIndex, VectorSource
from docpc_retrievers.store.search.centroids import CentroidIndex, document_centroids
from docpc_retrievers.store.search.exact import exact_scores
from docpc_retrievers.store.search.two_stage import CANDIDATE_TOKEN_BUDGET, TwoStageSearch, check_queries

__all__ = ["CANDIDATE_TOKEN_BUDGET", "CandidateIndex", "CentroidIndex", "TwoStageSearch", "VectorSource",
           "check_queries", "document_centroids", "exact_scores"]
