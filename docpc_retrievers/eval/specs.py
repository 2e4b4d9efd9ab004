"""System specs: the strings that name what ``docpc eval`` compares (grid, page, rerank, bm25, random)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from docpc_retrievers.config import AGGREGATES
from docpc_retrievers.documents.selection import STRATEGIES

logger = logging.getLogger(__name__)

#: Page-score aggregations of page-level systems.
AGGREGATIONS: tuple[str, ...] = AGGREGATES

_GRID_RE = re.compile(r"^(\d+)x(\d+)$")


class SystemSpecError(ValueError):
    """A system spec string that cannot be parsed."""


@dataclass(frozen=True)
class SystemSpec:
    """A parsed system: ``kind`` (grid, page, rerank, bm25, random) and its parameters."""

    text: str
    kind: str
    strategy: str | None = None
    pages: int | None = None
    grid: tuple[int, int] | None = None
    aggregate: str = "max"
    scope: str = "all"  # bm25: all pages or the selected ones
    top_n: int = 20
    seed: int = 0

    @property
    def slug(self) -> str:
        """A file-name-safe name of the spec (``grid:first:4`` -> ``grid-first-4``)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.text).strip("-")

    @property
    def visual(self) -> bool:
        return self.kind in ("grid", "page", "rerank")

    def index_key(self) -> str:
        """What the index depends on (search-time options such as aggregation or rerank excluded)."""
        if self.kind in ("grid", "rerank"):
            shape = f"-{self.grid[0]}x{self.grid[1]}" if self.grid else ""
            return f"grid-{self.strategy}-{self.pages}{shape}"
        if self.kind == "page":
            return "page-all" if self.pages is None else f"page-{self.strategy}-{self.pages}"
        if self.kind == "bm25":
            return "bm25-all" if self.scope == "all" else f"bm25-{self.strategy}-{self.pages}"
        return self.slug


def _positive(text: str, what: str, spec: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise SystemSpecError(f"system {spec!r}: {what} must be a positive integer, got {text!r}")
    return int(text)


def _strategy(text: str, spec: str) -> str:
    if text not in STRATEGIES:
        raise SystemSpecError(f"system {spec!r}: unknown strategy {text!r}; choose one of {', '.join(STRATEGIES)}")
    return text


def parse_system(text: str) -> SystemSpec:
    """Parse a system spec string (module docstring lists the forms); raises SystemSpecError.

    """
    spec = text.strip()
    parts = spec.split(":")
    kind = parts[0].lower()
    if kind == "grid":
        if len(parts) not in (3, 4):
            raise SystemSpecError(f"system {spec!r}: expected grid:STRATEGY:K[:ROWSxCOLS], e.g. grid:first:4")
        strategy, pages = _strategy(parts[1], spec), _positive(parts[2], "K", spec)
        grid = None
        if len(parts) == 4:
            m = _GRID_RE.match(parts[3])
            if not m or int(m[1]) < 1 or int(m[2]) < 1:
                raise SystemSpecError(f"system {spec!r}: grid shape must look like 2x2, got {parts[3]!r}")
            grid = (int(m[1]), int(m[2]))
            if grid[0] * grid[1] < pages:
                raise SystemSpecError(f"system {spec!r}: a {parts[3]} grid cannot hold {pages} pages")
        return SystemSpec(spec, "grid", strategy=strategy, pages=pages, grid=grid)
    if kind == "page":
        rest = parts[1:]
        aggregate = "max"
        if rest and rest[-1] in AGGREGATIONS:
            aggregate = rest.pop()
        if rest == ["all"]:
            parsed = SystemSpec(spec, "page", strategy="first", pages=None, aggregate=aggregate)
        elif len(rest) == 2:
            parsed = SystemSpec(
                spec, "page", strategy=_strategy(rest[0], spec), pages=_positive(rest[1], "K", spec), aggregate=aggregate
            )
        else:
            raise SystemSpecError(
                f"system {spec!r}: expected page:all[:AGG] or page:STRATEGY:K[:AGG] with AGG one of {', '.join(AGGREGATIONS)}"
            )
        return parsed
    if kind == "rerank":
        if len(parts) not in (3, 4):
            raise SystemSpecError(f"system {spec!r}: expected rerank:STRATEGY:K[:TOPN], e.g. rerank:first:4:20")
        strategy, pages = _strategy(parts[1], spec), _positive(parts[2], "K", spec)
        top_n = _positive(parts[3], "TOPN", spec) if len(parts) == 4 else 20
        return SystemSpec(spec, "rerank", strategy=strategy, pages=pages, top_n=top_n)
    if kind == "bm25":
        if parts[1:] == ["all"]:
            return SystemSpec(spec, "bm25", scope="all")
        if len(parts) == 4 and parts[1] == "selected":
            return SystemSpec(
                spec, "bm25", scope="selected", strategy=_strategy(parts[2], spec), pages=_positive(parts[3], "K", spec)
            )
        raise SystemSpecError(f"system {spec!r}: expected bm25:all or bm25:selected:STRATEGY:K")
    if kind == "random":
        if len(parts) == 1:
            return SystemSpec(spec, "random")
        if len(parts) == 2 and parts[1].isdigit():
            return SystemSpec(spec, "random", seed=int(parts[1]))
        raise SystemSpecError(f"system {spec!r}: expected random or random:SEED")
    raise SystemSpecError(
        f"unknown system {spec!r}; expected grid:STRATEGY:K, page:all, page:STRATEGY:K, rerank:STRATEGY:K, "
        "bm25:all, bm25:selected:STRATEGY:K or random"
    )
