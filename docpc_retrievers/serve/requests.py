"""Every request's arguments checked once, the same way for the MCP tools and the JSON API (and so ``--server``).

One rule for all: known fields only (an unknown one is named in the refusal), JSON types taken as they are (``"5"``
is not a number, ``"false"`` is not a boolean, ``true`` is not a count), and bounds stated in the message. The
search options are the schema's (:mod:`docpc_retrievers.retrievers.schema`): their descriptions and checks come from there,
with the server's own limits on top, because a server answers strangers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from docpc_retrievers.errors import DocPCError
from docpc_retrievers.filters import check_where
from docpc_retrievers.retrievers.options import SEARCH_OPTIONS, SearchOptions
from docpc_retrievers.retrievers.schema import Option

__all__ = [
    "LIMITS", "ExplainRequest", "ListRequest", "RequestError", "SearchRequest", "check_explain", "check_info",
    "check_list", "check_search",
]


@dataclass(frozen=True)
class Limits:
    """What one request may ask for: stated in docs/serve.md and in every refusal."""

    query_chars: int = 1000
    """A query's length in characters (the encoder's time grows with it; a normal question is under 300)."""
    query_tokens: int = 512
    """A query's length in the model's tokens (checked by the service, which holds the tokenizer)."""
    images: int = 10
    list_limit: int = 1000
    body_bytes: int = 1_000_000
    json_depth: int = 32


LIMITS = Limits()


class RequestError(DocPCError):
    """A request the server cannot answer as asked: the client's to fix (``status``: 400, 404 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SearchRequest:
    """A checked search request: its query, the search's options (checked once, as every front end's are) and
    how many of the top hits come back with their best page as a picture."""

    query: str
    options: SearchOptions
    images: int = 0


@dataclass(frozen=True)
class ExplainRequest:
    query: str
    id: str


@dataclass(frozen=True)
class ListRequest:
    where: dict[str, Any] | None = None
    limit: int = 100
    offset: int = 0


SERVED: dict[str, Option] = {o.server: o for o in SEARCH_OPTIONS if o.server}
"""The search options a request may carry, by their field name (the schema's ``server``); the others are the
server's own settings."""
SEARCH_FIELDS = {
    "query": "what to look for, in words",
    **{name: o.doc for name, o in SERVED.items()},
    "images": "how many of the top results also return their best page as an image",
}
"""The search request's fields and what each means (the option schema's words where it is one of its options)."""


def _known(args: Mapping[str, Any], known: Mapping[str, str] | tuple[str, ...], what: str) -> None:
    if not isinstance(args, Mapping):
        raise RequestError(f"the {what} request must be a JSON object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise RequestError(f"unknown field(s) in a {what} request: {', '.join(unknown)} "
                           f"(known: {', '.join(known)})")


def _count(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if value is None:
        raise RequestError(f"give {name} (a string)")
    if not isinstance(value, str):
        raise RequestError(f"{name} must be a string, got {value!r}")
    if not value.strip():
        raise RequestError(f"{name} is empty")
    return value


def _query(args: Mapping[str, Any]) -> str:
    query = _text(args, "query")
    if len(query) > LIMITS.query_chars:
        raise RequestError(f"query is {len(query):,} characters long; this server takes at most "
                           f"{LIMITS.query_chars:,}", status=413)
    return query.strip()


def _where(args: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RequestError(f"{name} must be a JSON object (a Chroma where filter), got {value!r}")
    try:
        check_where(value)
    except (ValueError, TypeError) as exc:
        raise RequestError(str(exc)) from None
    return dict(value) or None


def _paths(args: Mapping[str, Any], name: str, most: int) -> list[str] | None:
    value = args.get(name)
    if value is None:
        return None
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise RequestError(f"{name} must be a path or a list of paths (strings), got {value!r}")
    if len(paths) > most:
        raise RequestError(f"{name} names {len(paths)} paths; at most {most}")
    return paths


def _served(args: Mapping[str, Any], name: str, option: Option, path: Callable[[str], str]) -> Any:
    """A request field as JSON gives it (no conversion: ``"5"`` is not a count), within the server's bounds; the
    option's own check is :class:`SearchOptions`'."""
    kind = option.cli_kind
    if kind == "count":
        low = int((option.bounds or {}).get("ge", 1))
        return _count(args, name, option.default, low, option.server_max or 2**31)
    if kind == "flag":
        return _flag(args, name)
    if kind == "json":
        value = args.get(name)
        if value is not None and not isinstance(value, Mapping):
            raise RequestError(f"{name} must be a JSON object (a Chroma where filter), got {value!r}")
        return value
    if kind == "paths":
        paths = _paths(args, name, option.server_max or 2**31)
        return None if paths is None else [path(p) for p in paths]
    return args.get(name, option.default)


def _flag(args: Mapping[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {value!r}")
    return value


def check_search(args: Mapping[str, Any], *, path: Callable[[str], str] = str) -> SearchRequest:
    """A search request (``query``, the served options of :data:`SERVED`, ``images``), checked once: the JSON types
    and the server's bounds here, each option's own check by :class:`SearchOptions`, with the request's field names
    in the message. ``path``: how a path the client sent is read (the service's shared folder)."""
    _known(args, SEARCH_FIELDS, "search")
    query = _query(args)
    values = {o.name: _served(args, name, o, path) for name, o in SERVED.items() if name in args}
    try:
        options = SearchOptions.build(**values)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for name, o in SERVED.items():
            message = re.sub(rf"\b{o.name}\b", name, message) if name != o.name else message
        raise RequestError(message) from None
    return SearchRequest(query, options, images=_count(args, "images", 0, 0, LIMITS.images))


def check_explain(args: Mapping[str, Any]) -> ExplainRequest:
    """An explain request (``query``, ``id``), checked."""
    _known(args, ("query", "id"), "explain")
    return ExplainRequest(query=_query(args), id=_text(args, "id"))


def check_info(args: Mapping[str, Any]) -> None:
    """An info request: it takes no fields."""
    _known(args, (), "info")


def check_list(args: Mapping[str, Any]) -> ListRequest:
    """A list request (``where``, ``limit``, ``offset``), checked."""
    _known(args, ("where", "limit", "offset"), "list")
    return ListRequest(where=_where(args, "where"), limit=_count(args, "limit", 100, 1, LIMITS.list_limit),
                       offset=_count(args, "offset", 0, 0, 2**31))
