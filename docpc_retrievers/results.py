"""Result types shared by the index, the CLI and the framework integrations: one shape per answer."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from docpc_retrievers.documents.user_metadata import user_part

if TYPE_CHECKING:
    from docpc_retrievers.explain.explanation import Explanation


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
    other_shares: dict[str, float] = field(default_factory=dict)
    """The grid score's shares that no page holds (query prompt tokens, image prompt rows, empty cells); with the
    evidence pages' shares they add up to 1 (explain/shares.py, ``split_terms``)."""
    grid_score: float | None = None
    reranked: bool = False
    rerank_error: str | None = None
    """Why reranking was asked for this document and could not run (its source unreadable): it kept its grid score."""
    text: str | None = field(default=None, repr=False, compare=False)
    """The text layer of the selected pages, read with the hit (None where the search did not read it)."""
    grid_image: bytes | None = field(default=None, repr=False, compare=False)
    """The grid preview's bytes (WebP: lossless for text grids, quality 90 for photos and scans), read with the hit when the search was asked for them (``grids``)."""

    @classmethod
    def from_metadata(cls, doc_id: str, score: float, rank: int, metadata: dict[str, Any],
                      text: str | None = None) -> SearchResult:
        """A result from stored metadata; a PDF without a title is titled by its file name, in ``metadata`` too."""
        title = metadata.get("title") or metadata.get("file_name")
        if title and not metadata.get("title"):
            metadata = {**metadata, "title": title}
        return cls(
            id=doc_id,
            score=score,
            rank=rank,
            source=metadata.get("source"),
            title=metadata.get("title") or metadata.get("file_name"),
            total_pages=metadata.get("total_pages"),
            selected_pages=list(metadata.get("selected_pages") or []),
            metadata=dict(metadata),
            text=text,
        )

    def attach(self, query: str, explain: Callable[..., Explanation], preview: Callable[[str], bytes] | None = None) -> SearchResult:
        """Remember the query and the index's explainer, so :meth:`explain` and notebooks can use them.

        Kept outside the dataclass fields: equality, ``repr`` and ``dataclasses.replace`` ignore them.
        """
        object.__setattr__(self, "_query", query)
        object.__setattr__(self, "_explain", explain)
        object.__setattr__(self, "_preview", preview)
        return self

    def explain(self, **options: Any) -> Explanation:
        """Why this hit matched its query (see :meth:`docpc_retrievers.DocPCIndex.explain` for ``options``)."""
        explain = getattr(self, "_explain", None)
        if explain is None:
            from docpc_retrievers.errors import ExplainUnavailableError

            raise ExplainUnavailableError(
                f"result {self.id} does not come from a search (or was copied): call index.explain(query, doc_id)"
            )
        return explain(getattr(self, "_query"), self.id, result=self, **options)

    def _preview_bytes(self) -> bytes | None:
        preview = getattr(self, "_preview", None)
        if preview is None:
            return None
        try:
            return preview(self.id)
        except Exception:  # a display must not raise: no preview stored, source gone, ...
            return None

    def _repr_png_(self) -> bytes | None:
        """The grid preview, as PNG (Jupyter shows it under the result)."""
        data = self._preview_bytes()
        if data is None:
            return None
        from docpc_retrievers.image_bytes import as_png

        return as_png(data)

    def _repr_html_(self) -> str:
        """A card: rank, score, title, source, evidence pages and the grid preview (when there is one)."""
        import base64

        e = html.escape
        evidence = ", ".join(
            f"p{ev.label or ev.page} {ev.share:.0%}" if ev.share is not None else f"p{ev.label or ev.page} {ev.score or 0:.3f}"
            for ev in self.evidence_pages
        )
        parts = [
            f"<div><b>#{self.rank}</b> {e(str(self.title or self.id))} &middot; score {self.score:.4f}"
            + (f" (grid {self.grid_score:.4f}, reranked)" if self.reranked else ""),
            f"<br><code>{e(str(self.source or ''))}</code> &middot; pages {e(str(self.selected_pages))}"
            + (f" &middot; evidence {e(evidence)}" if evidence else ""),
        ]
        data = self._preview_bytes()
        if data is not None:
            mime = "image/webp" if data[:4] == b"RIFF" else "image/png"
            parts.append(f'<br><img src="data:{mime};base64,{base64.b64encode(data).decode()}" style="max-width:480px">')
        return "\n".join(parts) + "</div>"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        """A result back from its :meth:`to_dict` form (a server's answer; ``pages`` from a server before 0.4); only
        user keys in ``metadata``."""
        return cls(
            id=data["id"], score=float(data["score"]), rank=int(data["rank"]), source=data.get("source"),
            title=data.get("title"), total_pages=data.get("total_pages", data.get("pages")), selected_pages=list(data.get("selected_pages") or []),
            metadata=dict(data.get("metadata") or {}),
            evidence_pages=[EvidencePage(e["page"], e.get("share"), e.get("score"), e.get("label"))
                            for e in data.get("evidence_pages") or []],
            other_shares={str(k): float(v) for k, v in (data.get("other_shares") or {}).items()},
            grid_score=data.get("grid_score"), reranked=bool(data.get("reranked")), rerank_error=data.get("rerank_error"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` form."""
        return {
            "id": self.id,
            "score": self.score,
            "rank": self.rank,
            "source": self.source,
            "title": self.title,
            "total_pages": self.total_pages,
            "selected_pages": self.selected_pages,
            "evidence_pages": [e.to_dict() for e in self.evidence_pages],
            **({"other_shares": {k: round(v, 6) for k, v in self.other_shares.items()}} if self.other_shares else {}),
            "metadata": user_part(self.metadata),
            **({"grid_score": self.grid_score, "reranked": True} if self.reranked else {}),
            **({"reranked": False, "rerank_error": self.rerank_error} if self.rerank_error else {}),
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
    """What an ``add_pdfs`` run did, by document id.

    ``indexed``: encoded and stored in this run (``updated``: those among them that replaced an
    older version of the same path, whose ids are in ``replaced``); ``skipped``: already stored and
    unchanged; ``moved``: already stored, found at a new path (source updated, nothing encoded);
    ``metadata_updated``: unchanged files whose user metadata changed (record updated, nothing
    encoded); ``removed``: deleted by a prune because their source is gone; ``failed``: files that
    could not be used; ``duplicates``: ``(path, same_as)`` for files whose bytes another file holds (stored once,
    under ``same_as``); ``missing``: stored documents under the run's folders whose source is gone (what ``prune``
    would delete; counted only when the run does not prune). ``images_encoded`` counts grids (or pages, in page mode) sent to the
    encoder; ``timings`` holds seconds per stage: ``render_s`` (open, select, render, compose),
    ``encode_s``, ``commit_s`` (grid previews and store writes) and ``total_s`` (the whole call).
    """

    indexed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[IndexFailure] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    metadata_updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    images_encoded: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def add_time(self, stage: str, seconds: float) -> None:
        """Accumulate time spent in one stage."""
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def added(self) -> list[str]:
        """Documents new to the store (indexed, not replacing an older version of their path)."""
        updated = set(self.updated)
        return [i for i in self.indexed if i not in updated]

    def counts(self) -> dict[str, int]:
        """How many documents each outcome had: added, replaced, moved, removed, unchanged, failed, ..."""
        return {
            "added": len(self.added),
            "replaced": len(self.updated),
            "moved": len(self.moved),
            "removed": len(self.removed),
            "unchanged": len(self.skipped),
            "metadata_updated": len(self.metadata_updated),
            "failed": len(self.failed),
        }

    def summary(self) -> str:
        """For people: ``added 3, replaced 1, moved 0, removed 2, unchanged 10, failed 0``, then a line per
        duplicate and a hint when sources under the run's folders are gone."""
        counts = self.counts()
        if not counts["metadata_updated"]:
            counts.pop("metadata_updated")
        lines = [", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())]
        lines += [f"  duplicate: {path} has the same content as {same} (stored once)" for path, same in self.duplicates]
        if self.missing:
            one = len(self.missing) == 1
            lines.append(f"  {len(self.missing)} stored document{'' if one else 's'} under these folders "
                         f"{'has lost its' if one else 'have lost their'} source file{'' if one else 's'}: "
                         f"`docpc list --missing` shows {'it' if one else 'them'}, `--prune` deletes "
                         f"{'it' if one else 'them'}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` form: the counts, plus ``indexed``/``skipped`` as before and each failure."""
        return {
            **self.counts(),
            "indexed": len(self.indexed),
            "skipped": len(self.skipped),
            "failed": [f.to_dict() for f in self.failed],
            "removed_ids": list(self.removed),
            "moved_ids": list(self.moved),
            "duplicates": [{"path": path, "same_as": same} for path, same in self.duplicates],
            "missing_ids": list(self.missing),
        }


@dataclass(frozen=True)
class Hit:
    """What a framework integration turns into its own result type: a ranked document with its content.

    ``text`` is the text layer of the selected pages; ``metadata`` the
    stored keys plus score, rank and evidence (see
    :func:`docpc_retrievers.retrievers.result_metadata`); ``image`` the image
    asked for (``image_mime_type`` says its true format: WebP for
    stored grids, PNG for rendered pages and evidence pictures, or whatever
    ``image_format`` converted it to); ``pages`` the selected pages as
    ``(page number, image bytes, text)`` when page images were asked for
    (``image`` is then the page behind most of the score).
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
