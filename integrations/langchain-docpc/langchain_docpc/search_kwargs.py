"""LangChain's own ways of asking: ``search_type`` (MMR refused with the reason) and ``search_kwargs``.

They mean nothing to the core or to LlamaIndex, so they live here; the options they carry are the schema's
(``docpc_retrievers.retrievers.schema``) and are checked there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from docpc_retrievers.retrievers import check_known

__all__ = ["SEARCH_TYPES", "check_search_type", "merge_search_kwargs"]

SEARCH_TYPES = ("similarity", "similarity_score_threshold")
"""LangChain's search types the retrievers take: plain similarity, and similarity above ``score_threshold``."""
_NO_MMR = (
    "search_type='mmr' is not offered: maximal marginal relevance trades a hit's relevance against its similarity "
    "to hits already taken, on one scale. DocPC's relevance is MaxSim, a sum over the query's tokens with no fixed "
    "scale, and two documents have no MaxSim between them on that scale (it is asymmetric and grows with their "
    "vector counts). Use min_score_ratio to drop weak hits, or under=/filter= to draw hits from chosen folders"
)


def check_search_type(search_type: str, score_threshold: float | None) -> None:
    """A LangChain ``search_type`` this retriever honours, or ValueError saying why not (MMR: see ``_NO_MMR``)."""
    if search_type == "mmr":
        raise ValueError(_NO_MMR)
    if search_type not in SEARCH_TYPES:
        raise ValueError(f"search_type must be one of {', '.join(SEARCH_TYPES)}, got {search_type!r}")
    if search_type == "similarity_score_threshold" and score_threshold is None:
        raise ValueError("search_type='similarity_score_threshold' needs score_threshold (in search_kwargs)")


def merge_search_kwargs(
    given: Mapping[str, Any], search_kwargs: Mapping[str, Any] | None, fields: Iterable[str], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """Options from a ``search_kwargs`` dict (keys ``fields`` or their ``aliases``); an option given both ways with
    different values raises ``ValueError``, an unknown key ``TypeError``."""
    if not search_kwargs:
        return {}
    check_known(search_kwargs, [*fields, *aliases], "search_kwargs")
    out: dict[str, Any] = {}
    for key, value in search_kwargs.items():
        name = aliases.get(key, key)
        if (name in given and given[name] != value) or (name in out and out[name] != value):
            raise ValueError(f"{name} is given twice with different values: {given.get(name, out.get(name))!r} and "
                             f"search_kwargs[{key!r}]={value!r}; pass it once")
        out[name] = value
    return out
