"""Every option a search or a retriever takes, defined once: its name in the core and in each framework, its
default, type, description and check. The retrievers' fields and attributes, LangChain's ``search_kwargs``
spellings, the options saved with a store and the checks all derive from :data:`OPTIONS`; adding an option is
one entry here (plus, for a search option, its use in :class:`~docpc_retrievers.config.SearchOptions`).

Checks of what a search does with an option (``top_k``, ``filters``, ``aggregate``, the rerank settings,
``candidates``, ``under``) live with :class:`~docpc_retrievers.config.SearchOptions`, which every search builds;
the checks here are those of how hits are presented (images, thresholds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from docpc_retrievers.config import DEFAULT_TOP_K, Aggregate

__all__ = ["BY_NAME", "DEFAULT_PAGE_DPI", "IMAGE_FORMATS", "OPTIONS", "RETURN_IMAGES", "ImageFormat", "Option", "ReturnImages",
           "framework_names", "search_aliases"]

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


def _flag(value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"rerank must be True or False, got {value!r}")


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "langchain", self.langchain or self.name)
        object.__setattr__(self, "llamaindex", self.llamaindex or self.name)


OPTIONS: tuple[Option, ...] = (
    Option("top_k", DEFAULT_TOP_K, int, "Documents to return; 0 returns nothing, more than the corpus returns the "
           "whole corpus.", langchain="k", llamaindex="similarity_top_k", aliases=("top_k",), bounds={"ge": 0},
           cli=("-k", "--top-k"), cli_kind="count", cli_help=f"results to return (default {DEFAULT_TOP_K}, at least 1)"),
    Option("filters", None, dict[str, Any] | None, 'Chroma ``where`` filter on stored metadata, e.g. '
           '``{"total_pages": {"$gte": 2}}``.', nullable=True, langchain="filter", aliases=("filters",),
           cli=("--where",), cli_kind="json", cli_help='Chroma metadata filter as JSON, e.g. \'{"author": "Ada"}\''),
    Option("aggregate", "max", Aggregate, "Page-mode stores: page scores combined by MaxP (``max``), AvgP "
           "(``mean``) or SumP (``sum``).", cli=("--aggregate",), cli_kind="choice",
           cli_help="page-mode stores only: MaxP (max, default), AvgP or SumP"),
    Option("rerank", False, bool, "Grid-then-page reranking: rescore the top documents from some of their pages "
           "at full resolution.", check=_flag, cli=("--rerank",), cli_kind="flag",
           cli_help="grid-then-page: rescore the top documents page by page"),
    Option("rerank_top_n", None, int | None, "Documents reranked (core default 20).", nullable=True,
           bounds={"ge": 1}, cli=("--rerank-top-n",), cli_kind="count", cli_help="documents to rerank (default 20)"),
    Option("page_budget", None, int | None, "Pages encoded per reranked document (core default 4).", nullable=True,
           bounds={"ge": 1}, cli=("--page-budget",), cli_kind="count",
           cli_help="pages encoded per reranked document (default 4)"),
    Option("grid_weight", None, float | None, "Weight of the grid score in the fused score (core default 0.5).",
           nullable=True, bounds={"ge": 0.0, "le": 1.0}),
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
    Option("under", None, str | list[str] | None, "Search only the documents of these folders (or files), matched "
           "by path as ``delete`` matches a folder.", nullable=True, cli=("--under",), cli_kind="paths",
           cli_help="search only the documents of this folder or file (repeat for several)"),
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


def search_aliases() -> dict[str, str]:
    """Other spellings LangChain users write in ``search_kwargs`` -> the LangChain field name."""
    return {alias: o.langchain for o in OPTIONS for alias in o.aliases}
