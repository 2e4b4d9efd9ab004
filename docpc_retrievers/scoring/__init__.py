"""Scoring: MaxSim late interaction (one implementation), evidence attribution, BM25 for page texts."""

from docpc_retrievers.scoring.maxsim import maxsim, maxsim_padded, maxsim_reference, pad_vectors

__all__ = ["maxsim", "maxsim_padded", "maxsim_reference", "pad_vectors"]
