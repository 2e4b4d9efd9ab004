"""What a query must be, checked the same way wherever one enters (Python, both frameworks, the CLI, the server)."""

from __future__ import annotations

__all__ = ["check_query"]


def check_query(query: object) -> str:
    """The query, or TypeError for a non-string and ValueError for an empty or blank one."""
    if not isinstance(query, str):
        raise TypeError(f"the query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("the query is empty or only whitespace: give some text to search for")
    return query
