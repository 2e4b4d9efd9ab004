"""The one checked options value, generated from the schema (``schema.py``): built once at the edge, trusted below.

* :class:`SearchOptions`: what a search uses (a field per option with ``search=True``, plus ``password`` and which
  parts each hit is read with). Every front end builds one (``DocPCIndex.search``'s keywords, the retrievers, the
  command line, the server's requests); the searcher and the store take it as it is.
* :class:`RetrieverOptions`: a retriever's options (a field per option, plus ``password``): its search part is a
  :class:`SearchOptions` built once with it; the rest says how hits are presented. It names errors the way the
  framework spells an option and is saved with a store.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import field, fields, make_dataclass
from typing import Any

from docpc_retrievers.config import DEFAULT_TOP_K, RerankSettings
from docpc_retrievers.retrievers.arguments import check_known
from docpc_retrievers.retrievers.schema import BY_NAME, OPTIONS, Option

__all__ = ["LEGACY_NAMES", "SEARCH_OPTIONS", "RetrieverOptions", "SearchOptions"]

_OPTIONS_FORMAT = 1
#: Keys of option files written by version 0.1 (LlamaIndex's persist).
LEGACY_NAMES = {"similarity_top_k": "top_k", "where": "filters"}
SEARCH_OPTIONS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.search)
"""The options a search uses, in the schema's order (the others shape the hits)."""


def _checked_fields(value: Any, options: tuple[Option, ...]) -> None:
    """Each option's check, run once; None for an option where None is not a value of its own means its default."""
    for option in options:
        given = getattr(value, option.name)
        if given is None and not option.nullable:
            given = option.default
        object.__setattr__(value, option.name, option.validate(given))


class _SearchBehaviour:
    """What :class:`SearchOptions` does; its fields are :data:`SEARCH_OPTIONS`."""

    top_k: int
    rerank: bool
    rerank_top_n: int
    page_budget: int
    grid_weight: float
    password: str | None
    grids: bool
    texts: bool

    def __post_init__(self) -> None:
        _checked_fields(self, SEARCH_OPTIONS)

    @classmethod
    def build(cls, top_k: int = DEFAULT_TOP_K, **options: Any) -> SearchOptions:
        """Options from ``DocPCIndex.search``'s keywords (the schema's search options, and ``password``); None takes
        an option's default, an unknown keyword is a TypeError listing the known ones."""
        check_known(options, [*(o.name for o in SEARCH_OPTIONS if o.name != "top_k"), "password"], "search")
        return SearchOptions(top_k=top_k, **options)

    @property
    def rerank_settings(self) -> RerankSettings:
        """The reranker's settings (``rerank_top_n``, ``page_budget``, ``grid_weight``)."""
        return RerankSettings(self.rerank_top_n, self.page_budget, self.grid_weight)

    @property
    def depth(self) -> int:
        """How many first-stage hits a search needs: more than ``top_k`` when reranking."""
        return max(self.top_k, self.rerank_top_n) if self.rerank else self.top_k

    def reading(self, *, texts: bool, grids: bool) -> SearchOptions:
        """The same options, each hit read with its text / grid preview as well (nothing is checked again)."""
        out = copy.copy(self)
        object.__setattr__(out, "texts", texts)
        object.__setattr__(out, "grids", grids)
        return out  # type: ignore[return-value]


SearchOptions = make_dataclass(
    "SearchOptions",
    [(o.name, o.annotation, field(default=o.default)) for o in SEARCH_OPTIONS]
    + [("password", str | None, field(default=None, repr=False)), ("grids", bool, field(default=False)),
       ("texts", bool, field(default=False))],
    bases=(_SearchBehaviour,),
    frozen=True,
)
SearchOptions.__module__ = __name__  # make_dataclass takes ``module=`` only from Python 3.12
SearchOptions.__doc__ = (
    "One search's checked choices, a field per search option of the schema (docpc_retrievers/retrievers/schema.py), "
    "plus ``password`` (opens encrypted sources when pages are rendered, never saved) and ``grids`` / ``texts`` "
    "(each result read with its grid preview / text in the same pass as its metadata, so a document deleted "
    "meanwhile gives its slot to the next one). Built once where a search starts; nothing below checks it again."
)


class _OptionsBehaviour:
    """What :class:`RetrieverOptions` does; its fields are :data:`~docpc_retrievers.retrievers.schema.OPTIONS`."""

    password: str | None

    def __post_init__(self) -> None:
        _checked_fields(self, tuple(o for o in OPTIONS if not o.search))
        search = SearchOptions(**{o.name: getattr(self, o.name) for o in SEARCH_OPTIONS}, password=self.password)
        for o in SEARCH_OPTIONS:  # the checked forms (a filter's copy, folders resolved)
            object.__setattr__(self, o.name, getattr(search, o.name))
        object.__setattr__(self, "_search", search)

    @classmethod
    def from_framework(
        cls, values: Mapping[str, Any], names: Mapping[str, str], *, password: str | None = None
    ) -> RetrieverOptions:
        """Options from a retriever's own attribute names (``names``: framework name -> core name).

        Errors name the option as the framework spells it (``similarity_top_k``, ``k``, ...).
        """
        core = {names.get(k, k): v for k, v in values.items()}
        try:
            return RetrieverOptions(password=password, **core)
        except (TypeError, ValueError) as exc:
            message = str(exc)
            for framework, name in names.items():
                if framework != name:
                    message = re.sub(rf"\b{name}\b", framework, message)
            raise type(exc)(message) from None

    def search_options(self) -> SearchOptions:
        """The search part, checked when these options were built."""
        return self._search  # type: ignore[attr-defined, no-any-return]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form saved with a store (without the password)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        data.pop("password")
        data["filters"] = dict(data["filters"]) if data["filters"] else None
        data["under"] = list(data["under"]) or None
        return {"format": _OPTIONS_FORMAT, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetrieverOptions:
        """Rebuild saved options; unknown keys are ignored, a newer format is refused."""
        if data.get("format", _OPTIONS_FORMAT) != _OPTIONS_FORMAT:
            raise ValueError(f"retriever options format {data.get('format')!r} is not supported")
        renamed = {LEGACY_NAMES.get(k, k): v for k, v in data.items()}
        return RetrieverOptions(**{k: v for k, v in renamed.items() if k in BY_NAME})


RetrieverOptions = make_dataclass(
    "RetrieverOptions",
    [(o.name, o.annotation, field(default=o.default)) for o in OPTIONS]
    + [("password", str | None, field(default=None, repr=False))],
    bases=(_OptionsBehaviour,),
    frozen=True,
)
RetrieverOptions.__module__ = __name__
RetrieverOptions.__doc__ = (
    "The options both retrievers expose (:data:`docpc_retrievers.retrievers.schema.OPTIONS`, one field each, plus "
    "``password``, which opens encrypted sources and is never saved), checked once when built: the search part "
    "becomes its :class:`SearchOptions` (``search_options()``), the rest says how hits are presented."
)
