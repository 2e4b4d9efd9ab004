"""Every option a search or a retriever takes, defined once: its name in the core, in each framework, on the
command line and in the server's requests, its default, type, bounds, description and check.

Everything else derives from :data:`OPTIONS`: the checked options value (``options.py``: :class:`SearchOptions`
and the retrievers' :class:`RetrieverOptions`), ``DocPCIndex.search``'s keywords, the LangChain fields and the
LlamaIndex attributes, LangChain's ``search_kwargs`` spellings, the command line's flags (and which of them
``--server`` cannot send), the server's request fields and their bounds. Adding an option is one entry here plus
its use; no list elsewhere names them.

Options with ``search=True`` reach the store; the others (images, dpi, format, thresholds) shape the hits.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from docpc_retrievers.config import DEFAULT_TOP_K, Aggregate, RerankSettings, folders
from docpc_retrievers.filters import check_where

__all__ = ["BY_NAME", "DEFAULT_PAGE_DPI", "IMAGE_FORMATS", "OPTIONS", "RETURN_IMAGES", "ImageFormat", "Option", "ReturnImages",
           "framework_names", "option_parameters", "options_help", "search_aliases"]

#: Resolution of page images rendered on demand (``return_images="pages"``).
DEFAULT_PAGE_DPI = 144.0
#: ``"grid"``: the stored grid; ``"pages"``: the selected pages rendered from the source PDF; ``"evidence"``: the
#: explanation's picture (the grid with the query's heat and outlined pages, PNG); None: no image.
ReturnImages = Literal["grid", "pages", "evidence"] | None
RETURN_IMAGES: tuple[str | None, ...] = ("grid", "pages", "evidence", None)
#: Formats images can be converted to on the way out (``image_format``); None keeps each as made.
ImageFormat = Literal["png", "jpeg", "webp"] | None
IMAGE_FORMATS: tuple[str | None, ...] = ("png", "jpeg", "webp", None)


def _one_of(name: str, allowed: Sequence[Any], said: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"{name} must be {said}, got {value!r}")
    return check


def _positive_number(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"page_dpi must be > 0, got {value!r}")


def _number_or_none(value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"score_threshold must be a number, got {value!r}")


def _share(value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1):
        raise ValueError(f"min_score_ratio must be in (0, 1] (a share of the top hit's score), got {value!r}")


def _flag(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    return check


def _where(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"filters must be a Chroma where dict, got {type(value).__name__}")
    return check_where(dict(value)) or None  # a malformed filter fails here, before a model loads


def _folders(value: Any) -> tuple[str, ...]:
    return folders(value)


@dataclass(frozen=True)
class Option:
    """One option: its core ``name`` and ``default``, the ``annotation`` frameworks declare, what it does
    (``doc``), whether None is a value of its own (``nullable``: else None means "the default"), how it is checked,
    whether a search uses it (``search``; else it shapes the hits), and its names in LangChain (``langchain``, plus
    other spellings users write in ``search_kwargs``: ``aliases``) and LlamaIndex (``llamaindex``)."""

    name: str
    default: Any
    annotation: Any
    doc: str
    nullable: bool = False
    check: Callable[[Any], None] | None = None
    search: bool = True
    langchain: str = ""
    llamaindex: str = ""
    aliases: tuple[str, ...] = ()
    bounds: Mapping[str, float] | None = None
    """Numeric bounds (``ge``, ``gt``, ``le``) a framework's field declares, so its schema shows them."""
    cli: tuple[str, ...] = ()
    """The command line's flags for it (none: not offered there); the flag's value is given by ``cli_kind``:
    ``count`` (an integer >= 1), ``flag`` (on when given), ``paths`` (repeatable), ``json`` (a JSON object),
    ``choice`` (one of the annotation's values)."""
    cli_kind: str = ""
    cli_help: str = ""
    server: str = ""
    """Its field in the server's search requests (JSON API and MCP; none: the server's own settings apply)."""
    server_max: int | None = None
    """The most a server request may ask for (a count, or paths for ``under``): a server answers strangers."""
    normalize: Callable[[Any], Any] | None = None
    """Checks a value and returns the form the search keeps (a filter checked, folders resolved)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "langchain", self.langchain or self.name)
        object.__setattr__(self, "llamaindex", self.llamaindex or self.name)

    def validate(self, value: Any) -> Any:
        """``value`` checked as this option takes it (ValueError or TypeError naming the option), in the form a
        search keeps. The one check of an option: the checked options value runs it once, nothing below re-checks."""
        if self.normalize is not None:
            return self.normalize(value)
        if self.check is not None:
            self.check(value)
            return value
        if value is None and self.nullable:
            return None
        union = getattr(self.annotation, "__args__", None) if getattr(self.annotation, "__origin__", None) is not Literal else None
        kind = next((a for a in union if a is not type(None)), self.annotation) if union else self.annotation
        low = (self.bounds or {}).get("ge")
        high = (self.bounds or {}).get("le")
        if getattr(kind, "__origin__", None) is Literal:
            allowed = kind.__args__
            if value not in allowed:
                raise ValueError(f"{self.name} must be one of {', '.join(map(str, allowed))}, got {value!r}")
            return value
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
                extra = " (or None: the default)" if self.nullable else ""
                raise ValueError(f"{self.name} must be an integer >= {low}{extra}, got {value!r}")
            return value
        if kind is float:
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or (low is not None and value < low)
                    or (high is not None and value > high)):
                raise ValueError(f"{self.name} must be a number from {low} to {high}, got {value!r}")
            return float(value)
        return value


_RERANK = RerankSettings()
"""Reranking's defaults, stated by :class:`RerankSettings` alone."""

OPTIONS: tuple[Option, ...] = (
    Option("top_k", DEFAULT_TOP_K, int, "Documents to return; 0 returns nothing, more than the corpus returns the "
           "whole corpus.", langchain="k", llamaindex="similarity_top_k", aliases=("top_k",), bounds={"ge": 0},
           cli=("-k", "--top-k"), cli_kind="count", cli_help=f"results to return (default {DEFAULT_TOP_K}, 0 returns nothing)",
           server="k", server_max=100),
    Option("filters", None, dict[str, Any] | None, 'Chroma ``where`` filter on stored metadata, e.g. '
           '``{"total_pages": {"$gte": 2}}``.', nullable=True, langchain="filter", aliases=("filters",),
           cli=("--where",), cli_kind="json", cli_help='Chroma metadata filter as JSON, e.g. \'{"author": "Ada"}\'',
           normalize=_where, server="filters"),
    Option("aggregate", "max", Aggregate, "Page-mode stores: page scores combined by MaxP (``max``), AvgP "
           "(``mean``) or SumP (``sum``).", cli=("--aggregate",), cli_kind="choice",
           cli_help="page-mode stores only: MaxP (max, default), AvgP or SumP"),
    Option("rerank", False, bool, "Grid-then-page reranking: rescore the top documents from some of their pages "
           "at full resolution.", check=_flag("rerank"), cli=("--rerank",), cli_kind="flag",
           cli_help="grid-then-page: rescore the top documents page by page", server="rerank"),
    Option("rerank_top_n", _RERANK.top_n, int | None, "Documents reranked.", bounds={"ge": 1},
           cli=("--rerank-top-n",), cli_kind="count", cli_help=f"documents to rerank (default {_RERANK.top_n})"),
    Option("page_budget", _RERANK.page_budget, int | None, "Pages encoded per reranked document.", bounds={"ge": 1},
           cli=("--page-budget",), cli_kind="count",
           cli_help=f"pages encoded per reranked document (default {_RERANK.page_budget})"),
    Option("grid_weight", _RERANK.grid_weight, float | None, "Weight of the grid score in the fused score.",
           bounds={"ge": 0.0, "le": 1.0}),
    Option("return_images", "grid", ReturnImages, '``"grid"``: the composed grid; ``"pages"``: the selected pages; '
           '``"evidence"``: the grid with the query\'s heat and outlined pages (PNG, why it matched); None: no image.',
           nullable=True, search=False, check=_one_of("return_images", RETURN_IMAGES, "'grid', 'pages', 'evidence' or None")),
    Option("page_dpi", DEFAULT_PAGE_DPI, float, 'Resolution of page images with ``return_images="pages"``.',
           search=False, check=_positive_number, bounds={"gt": 0}),
    Option("image_format", None, ImageFormat, "Convert every image to this format (some LLM APIs take only PNG or "
           "JPEG); None: as made (``image_mime_type``).", nullable=True, search=False,
           check=_one_of("image_format", IMAGE_FORMATS, "'png', 'jpeg', 'webp' or None (as stored)")),
    Option("candidates", None, int | None, "First-stage count (None: by query length; more: higher recall on large "
           "stores, slower).", nullable=True, bounds={"ge": 1}, cli=("--candidates",), cli_kind="count",
           cli_help="documents the first stage keeps for exact scoring (default: by query length); more: higher "
                    "recall on large stores, slower"),
    Option("exhaustive", False, bool, "Score every document exactly, with no first stage (the exact top k of the "
           "whole store, as slow as the store is large).", check=_flag("exhaustive"), cli=("--exhaustive",),
           cli_kind="flag", cli_help="score every document exactly, with no first stage (slow on large stores)"),
    Option("under", None, str | list[str] | None, "Search only the documents of these folders (or files), matched "
           "by path as ``delete`` matches a folder.", nullable=True, cli=("--under",), cli_kind="paths",
           cli_help="search only the documents of this folder or file (repeat for several)", normalize=_folders,
           server="under", server_max=100),
    Option("partial", False, bool, "A store read through its shard searchers: when a searcher does not answer, "
           "answer from the others and mark each hit's metadata with ``missing_shards`` instead of failing (still an "
           "error when the others hold no match, since no hit could carry the mark; a store in one piece always "
           "answers whole).", check=_flag("partial"), cli=("--partial",), cli_kind="flag",
           cli_help="with shard searchers: when one does not answer, answer from the others, marked partial",
           server="partial"),
    Option("score_threshold", None, float | None, "Drop hits scoring below this raw MaxSim score (no fixed scale: "
           "it grows with the query's length).", nullable=True, search=False, check=_number_or_none),
    Option("min_score_ratio", None, float | None, "Drop hits scoring below this share of the top hit's score "
           "(carries from query to query).", nullable=True, search=False, check=_share, bounds={"gt": 0.0, "le": 1.0}),
)
"""The options, in the order frameworks list them."""


BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
"""Each option by its core name."""


def framework_names(framework: Literal["langchain", "llamaindex"]) -> dict[str, str]:
    """The framework's name of each option -> its core name (``k`` -> ``top_k`` for LangChain)."""
    return {getattr(o, framework): o.name for o in OPTIONS}


def options_help(framework: Literal["langchain", "llamaindex"], indent: str = "    ") -> str:
    """Every option as the framework spells it, with its default and what it does: the section of a retriever's
    docstring that ``help()`` shows (written from the schema, so it cannot fall behind it)."""
    lines = ["Options (keyword arguments, and attributes changeable between queries):", ""]
    for o in OPTIONS:
        lines.append(f"    {getattr(o, framework)} (default {o.default!r}): {' '.join(o.doc.split())}")
    return indent + f"\n{indent}".join(lines)


def option_parameters(framework: Literal["langchain", "llamaindex"],
                      annotations: Mapping[str, Any] | None = None) -> list[inspect.Parameter]:
    """Every option as a keyword-only parameter named as the framework names it, for a retriever's generated
    signature (``annotations``: the framework's own type for an option, by core name)."""
    return [inspect.Parameter(getattr(o, framework), inspect.Parameter.KEYWORD_ONLY, default=o.default,
                              annotation=(annotations or {}).get(o.name, o.annotation)) for o in OPTIONS]


def search_aliases() -> dict[str, str]:
    """Other spellings LangChain users write in ``search_kwargs`` -> the LangChain field name."""
    return {alias: o.langchain for o in OPTIONS for alias in o.aliases}
