"""Translate LlamaIndex ``MetadataFilters`` into the Chroma ``where`` dicts the DocPC store filters with.

Why: users filter LlamaIndex retrievers with ``MetadataFilters``; the DocPC
store keeps its records in Chroma, so each supported operator maps onto one
Chroma operator and anything Chroma cannot express fails loudly instead of
being silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

__all__ = ["SUPPORTED_OPERATORS", "UnsupportedFilterError", "metadata_filters_to_where"]

_SCALAR_OPS: dict[FilterOperator, str] = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.CONTAINS: "$contains",
}
_LIST_OPS: dict[FilterOperator, str] = {
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
}

#: Operators that map onto the store's filters (ANY/ALL become ``$or``/``$and`` of ``$contains``).
SUPPORTED_OPERATORS: tuple[FilterOperator, ...] = (
    *_SCALAR_OPS,
    *_LIST_OPS,
    FilterOperator.ANY,
    FilterOperator.ALL,
)


class UnsupportedFilterError(ValueError):
    """A filter uses an operator or condition the DocPC store (Chroma) cannot evaluate."""


def _as_list(f: MetadataFilter) -> list[Any]:
    if isinstance(f.value, (str, bytes)) or not isinstance(f.value, (list, tuple)):
        raise ValueError(f"filter on {f.key!r} with operator {f.operator.name} needs a list value, got {f.value!r}")
    if not f.value:
        raise ValueError(f"filter on {f.key!r} with operator {f.operator.name} needs a non-empty list")
    return list(f.value)


def _one(f: MetadataFilter) -> dict[str, Any]:
    op = FilterOperator(f.operator)
    if op in _SCALAR_OPS:
        if isinstance(f.value, (list, tuple)):
            raise ValueError(f"filter on {f.key!r} with operator {op.name} needs a single value, got a list")
        return {f.key: {_SCALAR_OPS[op]: f.value}}
    if op in _LIST_OPS:
        return {f.key: {_LIST_OPS[op]: _as_list(f)}}
    if op in (FilterOperator.ANY, FilterOperator.ALL):
        parts = [{f.key: {"$contains": v}} for v in _as_list(f)]
        if len(parts) == 1:
            return parts[0]
        return {"$or" if op is FilterOperator.ANY else "$and": parts}
    supported = ", ".join(o.name for o in SUPPORTED_OPERATORS)
    raise UnsupportedFilterError(
        f"filter operator {op.name} ({op.value!r}) on {f.key!r} is not supported by the DocPC store; "
        f"supported operators: {supported}"
    )


def metadata_filters_to_where(filters: MetadataFilters | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Chroma ``where`` dict for ``filters``; None when there is nothing to filter on.

    A plain mapping is taken as a ready-made Chroma ``where`` dict. Nested
    ``MetadataFilters`` combine with AND/OR; NOT and the full-text operators
    raise :class:`UnsupportedFilterError`.
    """
    if filters is None:
        return None
    if isinstance(filters, Mapping):
        return dict(filters) or None
    if not isinstance(filters, MetadataFilters):
        raise TypeError(f"filters must be MetadataFilters or a Chroma where dict, not {type(filters).__name__}")
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition not in (FilterCondition.AND, FilterCondition.OR):
        raise UnsupportedFilterError(
            f"filter condition {condition.name} is not supported by the DocPC store; use AND or OR "
            "(negate single filters with NE or NIN instead)"
        )
    parts: list[dict[str, Any]] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            nested = metadata_filters_to_where(f)
            if nested is not None:
                parts.append(nested)
        else:
            parts.append(_one(f))
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return {"$and" if condition is FilterCondition.AND else "$or": parts}
