"""Result types shared by the index, the CLI and the framework integrations: one shape per answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


__all__ = ["EvidencePage", "Hit", "IndexFailure", "IndexReport", "SearchResult"]


@dataclass(frozen=True)
class EvidencePage:
    """A page behind a result (1-based number): its share of the grid's MaxSim, or its own page score."""

    page: int
    share: float | None = None
    score: float | None = None
    label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"page": self.page}
        if self.share is not None:
            out["share"] = round(self.share, 6)
        if self.score is not None:
            out["score"] = self.score
        if self.label is not None:
            out["label"] = self.label
        return out


@dataclass(frozen=True)
class SearchResult:
    """One ranked document: its id, MaxSim score (higher is better) and stored metadata.

    ``selected_pages`` are 1-based page numbers, as people count pages;
    ``metadata`` holds everything else the store keeps (title, author,
    layout, strategy, ...). ``evidence_pages`` ranks the pages behind the
    score: by share of the grid's MaxSim (grid mode), or by each page's own
    score (page mode, and after reranking, when ``score`` is the fused score
    and ``grid_score`` the score before it).
    """

    id: str
    score: float
    rank: int
    source: str | None
    title: str | None
    total_pages: int | None
    selected_pages: list[int]
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    evidence_pages: list[EvidencePage] = field(default_factory=list)
    grid_score: float | None = None
    reranked: bool = False

    @classmethod
    def from_metadata(cls, doc_id: str, score: float, rank: int, metadata: dict[str, Any]) -> SearchResult:
        return cls(
            id=doc_id,
            score=score,
            rank=rank,
            source=metadata.get("source"),
            title=metadata.get("title") or metadata.get("file_name"),
            total_pages=metadata.get("total_pages"),
            selected_pages=list(metadata.get("selected_pages") or []),
            metadata=dict(metadata),
        )

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` form."""
        return {
            "id": self.id,
            "score": self.score,
            "rank": self.rank,
            "source": self.source,
            "title": self.title,
            "pages": self.total_pages,
            "selected_pages": self.selected_pages,
            "evidence_pages": [e.to_dict() for e in self.evidence_pages],
            **({"grid_score": self.grid_score, "reranked": True} if self.reranked else {}),
        }


@dataclass(frozen=True)
class IndexFailure:
    """A file that could not be indexed, and why (the rest of the batch went on)."""

    path: str
    reason: str
    kind: str = "error"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason, "kind": self.kind}


@dataclass
class IndexReport:
    """What an ``add_pdfs`` run did: ids indexed, ids skipped as unchanged, failures.

    ``images_encoded`` counts grids (or pages, in page mode) sent to the
    encoder; ``timings`` holds seconds per stage: ``render_s`` (open, select,
    render, compose), ``encode_s``, ``commit_s`` (grid previews and store
    writes) and ``total_s`` (the whole call).
    """

    indexed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[IndexFailure] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    images_encoded: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def add_time(self, stage: str, seconds: float) -> None:
        """Accumulate time spent in one stage."""
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` form."""
        return {
            "indexed": len(self.indexed),
            "skipped": len(self.skipped),
            "failed": [f.to_dict() for f in self.failed],
        }


@dataclass(frozen=True)
class Hit:
    """What a framework integration turns into its own result type: a ranked document with its content.

    ``text`` is the text layer of the selected pages; ``metadata`` the
    stored keys plus score, rank and evidence (see
    :func:`docpc_retrievers.adapters.result_metadata`); ``image`` the grid
    preview bytes when asked for and kept (``image_mime_type`` says which
    format: lossless WebP for stored grids); ``pages`` the selected pages as
    ``(page number, PNG bytes, text)`` when page images were asked for.
    """

    result: SearchResult
    text: str
    metadata: dict[str, Any]
    image: bytes | None = None
    pages: list[tuple[int, bytes, str]] = field(default_factory=list)
    image_mime_type: str | None = None

    @property
    def id(self) -> str:
        return self.result.id

    @property
    def score(self) -> float:
        return self.result.score
