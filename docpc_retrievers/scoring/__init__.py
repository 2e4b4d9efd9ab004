"""MaxSim scoring of late-interaction multi-vectors."""

from docpc_retrievers.scoring.maxsim import maxsim, maxsim_int8, maxsim_reference

__all__ = ["maxsim", "maxsim_int8", "maxsim_reference"]
