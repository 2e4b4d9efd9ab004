"""Why a document matched: per-token MaxSim terms laid back onto the grid, page shares, pictures and reports.

``contributions`` (the numbers), ``pictures`` (Pillow drawing), ``explanation``
(the result type and its HTML), ``explainer`` (reads the store, builds them).
"""

from __future__ import annotations

from docpc_retrievers.explain.contributions import TokenContribution, token_contributions
from docpc_retrievers.explain.explainer import DEFAULT_EXPLAIN_DPI, Explainer
from docpc_retrievers.explain.explanation import Explanation, PageCrop, PagePicture

__all__ = [
    "DEFAULT_EXPLAIN_DPI",
    "Explainer",
    "Explanation",
    "PageCrop",
    "PagePicture",
    "TokenContribution",
    "token_contributions",
]
