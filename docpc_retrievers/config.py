"""Every setting of docpc-retrievers, each default stated once.

* :class:`GridSpec`: how a document becomes one grid (page selection and
  layout); shared by indexing and training.
* :class:`IndexSettings`: a :class:`GridSpec` plus the mode (grid or page) and
  the page size; recorded in a store so every document is built the same way.
* :class:`EncoderOptions`: how the encoder runs (device, dtype, batch size,
  visual-token budget); passed to :class:`~docpc_retrievers.encoders.ColPaliEncoder`.
* :class:`RerankSettings`: grid-then-page reranking's settings (a search's options are the retriever layer's:
  ``docpc_retrievers/retrievers/options.py``).
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal


__all__ = [
    "AGGREGATES",
    "DEFAULT_CELL_SIZE",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_POOL_FACTOR",
    "DEFAULT_TOP_K",
    "ENCODE_IN",
    "MODES",
    "Aggregate",
    "EncoderOptions",
    "GridSpec",
    "IndexSettings",
    "RerankSettings",
    "STRATEGIES",
    "check_candidates",
    "grid_shape",
    "with_previews",
]

#: Default cell size in pixels (width, height): a portrait page ratio close to A4/Letter.
DEFAULT_CELL_SIZE: tuple[int, int] = (512, 662)

#: Valid page selection strategies, in the order the documentation lists them.
STRATEGIES: tuple[str, ...] = ("first", "boundary", "uniform", "random", "last", "cluster")


def grid_shape(k: int) -> tuple[int, int]:
    """(rows, cols) of the most square grid holding k pages: cols = ceil(sqrt(k)), rows = ceil(k/cols)."""
    if isinstance(k, bool):
        raise TypeError("k must be an integer")
    k = operator.index(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    root = math.isqrt(k)
    cols = root if root * root == k else root + 1
    rows = -(-k // cols)
    return rows, cols


#: PDFs larger than this are refused (each one fails on its own; the batch goes on).
DEFAULT_MAX_FILE_BYTES = 512 * 1024 * 1024

ENCODE_IN = ("auto", "process", "thread")
"""Where an indexing run encodes: a process of its own, a thread of the indexing process, or auto (a process on a
CUDA GPU, where launching kernels would compete with the commits for Python's lock, for runs of 256 files or more;
a thread elsewhere)."""

#: ``grid``: K pages composed into one image per document (DocPC); ``page``: every
#: selected page encoded on its own, the page-level baseline (MaxP/AvgP/SumP).
MODES = ("grid", "page")

#: Box each page is rendered into for page mode and reranking; the processor then
#: scales it to its own resolution (about 768 visual tokens for ColQwen2).
DEFAULT_PAGE_SIZE = (1024, 1324)

#: Token pooling factor of new stores: 1 keeps every vector the model gives (quality first: on real token vectors
#: it keeps recall@10 0.994-0.998 of exact MaxSim, pooling by 2 0.909-0.954; docs/store.md). 2 halves the bytes.
DEFAULT_POOL_FACTOR = 1

#: Documents a search returns when not told otherwise.
DEFAULT_TOP_K = 5

#: How page scores combine into a document score in page mode: MaxP, AvgP, SumP.
Aggregate = Literal["max", "mean", "sum"]
AGGREGATES: tuple[str, ...] = Aggregate.__args__  # type: ignore[attr-defined]


def check_candidates(candidates: Any, name: str = "candidates") -> None:
    """ValueError (naming the option ``name``) unless a search's first-stage count is None or an integer >= 1."""
    if candidates is not None and (isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1):
        raise ValueError(f"{name} must be an integer >= 1 (or None: the store's own count), got {candidates!r}")


def _pair(value: Any, name: str) -> tuple[int, int]:
    if len(value) != 2 or any(isinstance(v, bool) or operator.index(v) < 1 for v in value):
        raise ValueError(f"{name} must be two integers >= 1, got {value!r}")
    return int(value[0]), int(value[1])


@dataclass(frozen=True)
class GridSpec:
    """How a document becomes one grid image: page selection and layout.

    ``strategy`` picks the pages (see :data:`STRATEGIES`); ``pages`` is K;
    ``grid`` an explicit ``(rows, cols)`` (default: the near-square grid
    holding K); ``cell_size`` each cell's (width, height) in pixels;
    ``seed`` drives the ``random`` and ``cluster`` strategies.
    """

    strategy: str = "first"
    pages: int = 4
    grid: tuple[int, int] | None = None
    cell_size: tuple[int, int] = DEFAULT_CELL_SIZE
    seed: int = 0

    def __post_init__(self) -> None:
        _check_selection(self.strategy, self.pages, required=True)
        object.__setattr__(self, "cell_size", _pair(self.cell_size, "cell_size"))
        if self.grid is not None:
            object.__setattr__(self, "grid", _check_grid(self.grid, self.pages))

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of the grid."""
        return self.grid if self.grid is not None else grid_shape(self.pages)

    @property
    def image_size(self) -> tuple[int, int]:
        """(width, height) in pixels of every grid image."""
        rows, cols = self.shape
        return self.cell_size[0] * cols, self.cell_size[1] * rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` reverses it."""
        return {
            "strategy": self.strategy,
            "pages": self.pages,
            "grid": list(self.shape),
            "cell_size": list(self.cell_size),
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GridSpec:
        """Rebuild from :meth:`to_dict` output (missing keys take the defaults)."""
        grid = data.get("grid")
        return cls(
            strategy=str(data.get("strategy", "first")),
            pages=int(data.get("pages", 4)),
            grid=(int(grid[0]), int(grid[1])) if grid else None,
            cell_size=tuple(int(v) for v in data.get("cell_size", DEFAULT_CELL_SIZE)),  # type: ignore[arg-type]
            seed=int(data.get("seed", 0)),
        )


def _check_selection(strategy: str, pages: int | None, *, required: bool) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if pages is None:
        if required:
            raise ValueError("grid mode needs a page count K (pages=...)")
    elif isinstance(pages, bool) or operator.index(pages) < 1:
        raise ValueError(f"pages (K) must be >= 1, got {pages!r}")


def _check_grid(grid: tuple[int, int] | str, pages: int | None) -> tuple[int, int]:
    """A grid shape as ``(rows, cols)``: a pair of integers, or text ``ROWSxCOLS`` as the command line takes it."""
    try:
        if isinstance(grid, str):
            rows, cols = (int(v) for v in grid.lower().split("x"))
        else:
            rows, cols = (operator.index(v) for v in grid)
    except (TypeError, ValueError):
        raise ValueError(f"grid must be ROWSxCOLS such as '2x2' or a pair of integers (2, 2), got {grid!r}") from None
    if rows < 1 or cols < 1 or (pages is not None and rows * cols < pages):
        raise ValueError(f"a {rows}x{cols} grid cannot hold {pages} pages")
    return rows, cols


@dataclass(frozen=True)
class IndexSettings:
    """How documents become what is encoded; recorded in the store so every document is built the same way.

    Grid mode (default) composes ``pages`` (K) representative pages into one
    grid per document (see :class:`GridSpec` for ``strategy``, ``grid``,
    ``cell_size``, ``seed``). Page mode encodes each selected page on its
    own (``pages=None``: every page), rendered into ``page_size``, which is
    also the size of full-resolution pages for reranking; ``page_canvas``
    centres each page on a white ``page_size`` canvas, as a grid centres pages
    in its cells, so a page and a grid of the same size become the same number
    of visual tokens and cost the same to encode. ``pool_factor`` pools each
    image's vectors before storage (1: off). ``grid_previews=False`` keeps no
    grid image per document (about a quarter of a store's bytes); one asked
    for is composed again from its PDF.
    """

    strategy: str = "first"
    pages: int | None = 4
    grid: tuple[int, int] | None = None
    cell_size: tuple[int, int] = DEFAULT_CELL_SIZE
    seed: int = 0
    mode: str = "grid"
    page_size: tuple[int, int] = DEFAULT_PAGE_SIZE
    pool_factor: int = DEFAULT_POOL_FACTOR
    page_canvas: bool = True
    grid_previews: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.pool_factor, bool) or operator.index(self.pool_factor) < 1:
            raise ValueError(f"pool_factor must be >= 1 (1: no pooling), got {self.pool_factor!r}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        _check_selection(self.strategy, self.pages, required=self.mode == "grid")
        if self.grid is not None and self.mode == "page":
            raise ValueError("grid= applies to grid mode only")
        if self.grid is not None:
            object.__setattr__(self, "grid", _check_grid(self.grid, self.pages))

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of the grid (grid mode)."""
        if self.grid is not None:
            return (int(self.grid[0]), int(self.grid[1]))
        return grid_shape(self.pages or 1)

    def to_dict(self) -> dict[str, Any]:
        """The form recorded in a store; :meth:`from_dict` reverses it."""
        out: dict[str, Any] = {"mode": self.mode, "strategy": self.strategy, "pages": self.pages, "seed": self.seed}
        if self.mode == "grid":
            out["grid"] = list(self.shape)
            out["cell_size"] = list(self.cell_size)
        out["page_size"] = list(self.page_size)  # page mode, and full-resolution pages for reranking
        out["pool_factor"] = self.pool_factor
        out["page_canvas"] = self.page_canvas
        if not self.grid_previews:  # recorded only when off, so stores from before the option compare equal
            out["grid_previews"] = False
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IndexSettings:
        """Rebuild from :meth:`to_dict` output (missing keys take the defaults)."""
        grid = data.get("grid")
        pages = data.get("pages", 4)
        return cls(
            strategy=str(data.get("strategy", "first")),
            pages=None if pages is None else int(pages),
            grid=(int(grid[0]), int(grid[1])) if grid else None,
            cell_size=tuple(data.get("cell_size", DEFAULT_CELL_SIZE)),  # type: ignore[arg-type]
            seed=int(data.get("seed", 0)),
            mode=str(data.get("mode", "grid")),
            page_size=tuple(data.get("page_size", DEFAULT_PAGE_SIZE)),  # type: ignore[arg-type]
            pool_factor=int(data.get("pool_factor", 1)),  # recorded by every store since 0.2; 0.1 stores had none
            # page-mode stores before 0.2 encoded bare pages; grid stores only rerank with it, at query time
            page_canvas=bool(data.get("page_canvas", data.get("mode", "grid") != "page")),
            grid_previews=bool(data.get("grid_previews", True)),
        )


def with_previews(settings: IndexSettings | None, recorded: Mapping[str, Any] | None,
                  store_grids: bool | None) -> IndexSettings | None:
    """``settings`` (or the recorded ones) with ``grid_previews=store_grids``; unchanged when ``store_grids`` is None.

    Folding the option into the settings makes a store recorded otherwise refuse it by name.
    """
    if store_grids is None:
        return settings
    base = settings or (IndexSettings.from_dict(recorded) if recorded else IndexSettings())
    return replace(base, grid_previews=store_grids)


@dataclass(frozen=True)
class EncoderOptions:
    """How the encoder runs; None leaves the encoder's own default (best device, its dtype, ...).

    ``max_num_visual_tokens`` caps visual tokens per image for Qwen-family
    models (changes the embedding, so it is recorded in the store).
    """

    device: str | None = None
    dtype: str | None = None
    batch_size: int | None = None
    max_num_visual_tokens: int | None = None
    local_files_only: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_num_visual_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or operator.index(value) < 1):
                raise ValueError(f"{name} must be >= 1, got {value!r}")

    @classmethod
    def coerce(cls, value: EncoderOptions | Mapping[str, Any] | None) -> EncoderOptions:
        """Accept options, a plain ``encoder_kwargs`` dict (the older spelling) or None."""
        if isinstance(value, EncoderOptions):
            return value
        data = dict(value or {})
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: data.pop(k) for k in list(data) if k in known}, extra=data)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the encoder's constructor (only what was set)."""
        out = {k: v for k, v in asdict(self).items() if k != "extra" and v is not None}
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class RerankSettings:
    """Grid-then-page reranking: ``top_n`` documents rescored, each from at most ``page_budget`` pages.

    ``grid_weight`` weighs the grid score against the best page score in the
    fused score (see :func:`docpc_retrievers.rerank.fuse`).
    """

    top_n: int = 20
    page_budget: int = 4
    grid_weight: float = 0.5

    def __post_init__(self) -> None:
        if self.top_n < 1 or self.page_budget < 1:
            raise ValueError("rerank top_n and page_budget must be >= 1")
        if not 0.0 <= self.grid_weight <= 1.0:
            raise ValueError("grid_weight must be within [0, 1]")

    @classmethod
    def build(
        cls, top_n: int | None = None, page_budget: int | None = None, grid_weight: float | None = None
    ) -> RerankSettings:
        """Settings from optional values; None takes the default."""
        d = cls()
        return cls(
            top_n=d.top_n if top_n is None else top_n,
            page_budget=d.page_budget if page_budget is None else page_budget,
            grid_weight=d.grid_weight if grid_weight is None else grid_weight,
        )


def folders(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> tuple[str, ...]:
    """Folders or files as absolute paths (``~`` expanded, links resolved), as the store records sources."""
    if paths is None:
        return ()
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    for item in items:
        if not isinstance(item, (str, os.PathLike)) or not str(item).strip():
            raise ValueError(f"under takes folder or file paths, got {item!r}")
    return tuple(dict.fromkeys(str(Path(p).expanduser().resolve()) for p in items))
