"""Metadata filters (Chroma ``where`` dicts) checked before anything heavy runs.

A typo in a filter must fail at once with the operator or key it is about,
not after a model has loaded, and as this library's error, not a bare
``ValueError`` from the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from docpc_retrievers.errors import InvalidFilterError

__all__ = ["COMPARISON_OPERATORS", "LOGICAL_OPERATORS", "CheckedWhere", "check_where", "filter_keys"]

COMPARISON_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains", "$not_contains")
LOGICAL_OPERATORS = ("$and", "$or")
_TEXT_KEYS = frozenset({"source", "file_name", "title", "author", "mode", "strategy", "layout", "indexed_at", "model"})
"""Built-in keys whose values are strings: ``$contains`` on them could never match."""


def _describe(where: Any) -> str:
    try:
        return json.dumps(where, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(where)


def _walk(where: Mapping[str, Any]) -> None:
    """Our own checks first: they name the key, which Chroma's messages do not."""
    for key, value in where.items():
        if not isinstance(key, str):
            raise InvalidFilterError(f"filter key {key!r} is not a string")
        if key.startswith("$"):
            if key not in LOGICAL_OPERATORS:
                raise InvalidFilterError(
                    f"unknown logical operator {key!r}; use {' or '.join(LOGICAL_OPERATORS)} "
                    f"(with a list of at least two filters), or a metadata key"
                )
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, Mapping):
                        _walk(item)
            continue
        if isinstance(value, Mapping):
            for op in value:
                if op not in COMPARISON_OPERATORS:
                    raise InvalidFilterError(
                        f"unknown operator {op!r} for key {key!r}; valid operators: {', '.join(COMPARISON_OPERATORS)}"
                    )
                if op in ("$contains", "$not_contains") and key in _TEXT_KEYS:
                    raise InvalidFilterError(
                        f"{op} on {key!r} can never match: {op} tests the items of a list-valued key, and {key!r} "
                        "holds text (metadata filters have no substring test); use $eq or $in for whole values, or "
                        "search a folder's documents with --under PATH (under= in Python)"
                    )


class CheckedWhere(dict):  # type: ignore[type-arg]
    """A filter :func:`check_where` has checked: passed on, it is not checked again."""


def check_where(where: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The filter as a plain dict (a :class:`CheckedWhere`), or :class:`InvalidFilterError` naming what is wrong and
    what is valid. A filter checked already comes back as it is: the check runs once however deep it is passed."""
    if where is None or isinstance(where, CheckedWhere):
        return where
    if not isinstance(where, Mapping):
        raise InvalidFilterError(f"a filter must be a dict (a Chroma where filter), got {type(where).__name__}")
    if not where:
        return None
    return CheckedWhere(_validated(where))


def _validated(where: Mapping[str, Any]) -> dict[str, Any]:
    """The filter's own check: our names first, then Chroma's."""
    plain = json.loads(json.dumps(where, default=_unserialisable))  # plain dicts and lists, or a clear error
    _walk(plain)
    from chromadb.api.types import validate_where

    try:
        validate_where(plain)
    except (ValueError, TypeError) as exc:
        raise InvalidFilterError(
            f"invalid filter {_describe(plain)}: {exc}. Comparison operators: {', '.join(COMPARISON_OPERATORS)}; "
            f"logical: {', '.join(LOGICAL_OPERATORS)} with a list of at least two filters"
        ) from None
    return plain


def _unserialisable(value: Any) -> Any:
    raise InvalidFilterError(f"filter value {value!r} of type {type(value).__name__} cannot be used in a filter")


def filter_keys(where: Mapping[str, Any] | None) -> list[str]:
    """The metadata keys a filter names, in order, once each (inside ``$and`` / ``$or`` too)."""
    keys: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(key, str) and key in LOGICAL_OPERATORS and isinstance(value, list):
                    for item in value:
                        walk(item)
                elif isinstance(key, str) and not key.startswith("$"):
                    keys.append(key)

    walk(where or {})
    return list(dict.fromkeys(keys))
