"""The evaluation report: quality and efficiency tables, per-query outcomes, JSON and Markdown output."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docpc_retrievers.eval.corpus import LabelledQuery
from docpc_retrievers.eval.metrics import METRICS, EvaluationResult, metric_name, rank_documents
from docpc_retrievers.eval.specs import SystemSpec
from docpc_retrievers.eval.timing import IndexStats

logger = logging.getLogger(__name__)

@dataclass
class SystemResult:
    """One system's outcome: its spec, efficiency stats, run and metric values."""

    spec: SystemSpec
    stats: IndexStats
    run: dict[str, dict[str, float]]
    metrics: EvaluationResult

    def successes(self, qrels: Mapping[str, Mapping[str, int]], k: int) -> set[str]:
        """Queries with at least one positive in this system's top k."""
        out = set()
        for qid, rel in qrels.items():
            ranked = rank_documents(self.run.get(qid, {}))[:k]
            if any(rel.get(d, 0) > 0 for d in ranked):
                out.add(qid)
        return out


_EFFICIENCY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("images_encoded", "images encoded"),
    ("vectors_stored", "vectors stored"),
    ("bytes_on_disk", "bytes on disk"),
    ("encode_s", "encode s"),
    ("insert_s", "insert s"),
    ("total_index_s", "indexing s"),
    ("query_p50_ms", "query p50 ms"),
)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if key == "bytes_on_disk":
        return _human_bytes(float(value))
    if isinstance(value, float):
        return f"{value:.3f}" if key.endswith("_s") else f"{value:.1f}"
    return f"{value:,}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class EvaluationReport:
    """Everything ``docpc eval`` writes: per-system results plus the settings of the run."""

    dataset: str
    split: str
    model: str | None
    ks: tuple[int, ...]
    metric: str
    success_k: int
    queries: list[LabelledQuery]
    systems: list[SystemResult]

    @property
    def main_metric(self) -> str:
        return metric_name(self.metric, self.ks[0])

    def domains(self) -> list[str]:
        """Quality-table columns: the query domains (``other`` for untagged queries when some are tagged)."""
        tagged = sorted({q.domain for q in self.queries if q.domain})
        if not tagged:
            return ["all"]
        return tagged + (["other"] if any(q.domain is None for q in self.queries) else [])

    def _domain_queries(self, domain: str) -> list[str]:
        if domain == "all":
            return [q.query_id for q in self.queries]
        if domain == "other":
            return [q.query_id for q in self.queries if q.domain is None]
        return [q.query_id for q in self.queries if q.domain == domain]

    def quality(self) -> list[dict[str, Any]]:
        """Rows: system, main metric per domain, macro average over domains, mean over all queries."""
        rows = []
        for r in self.systems:
            per_domain = {d: r.metrics.mean_over(self._domain_queries(d), self.main_metric) for d in self.domains()}
            rows.append(
                {
                    "system": r.spec.text,
                    "domains": per_domain,
                    "average": math.fsum(per_domain.values()) / len(per_domain),
                    "all_queries": r.metrics.mean[self.main_metric],
                }
            )
        return rows

    def reference(self) -> SystemResult:
        """The system ratios are relative to: the first page-level one, else the first system."""
        return next((r for r in self.systems if r.spec.kind == "page"), self.systems[0])

    def efficiency(self) -> list[dict[str, Any]]:
        ref = self.reference().stats
        rows = []
        for r in self.systems:
            values = {key: getattr(r.stats, key) for key, _ in _EFFICIENCY_COLUMNS}
            ratios: dict[str, float | None] = {}
            for key, _ in _EFFICIENCY_COLUMNS:
                base = getattr(ref, key)
                ratios[key] = values[key] / base if (values[key] is not None and base) else None
            rows.append({"system": r.spec.text, **values, "ratio": ratios, "reused": r.stats.reused})
        return rows

    def breakdown(self) -> dict[str, Any] | None:
        """Per-query outcomes of the first two systems: both / only A / only B / neither succeed."""
        if len(self.systems) < 2:
            return None
        a, b = self.systems[0], self.systems[1]
        qrels = {q.query_id: q.relevance for q in self.queries}
        sa, sb = a.successes(qrels, self.success_k), b.successes(qrels, self.success_k)
        everyone = [q.query_id for q in self.queries]
        groups = {
            "both": [q for q in everyone if q in sa and q in sb],
            "only_a": [q for q in everyone if q in sa and q not in sb],
            "only_b": [q for q in everyone if q in sb and q not in sa],
            "neither": [q for q in everyone if q not in sa and q not in sb],
        }
        return {
            "a": a.spec.text,
            "b": b.spec.text,
            "success": f"a positive in the top {self.success_k}",
            "counts": {k: len(v) for k, v in groups.items()},
            "queries": groups,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "model": self.model,
            "queries": len(self.queries),
            "metric": self.main_metric,
            "ks": list(self.ks),
            "conventions": {
                "missing_queries": "count as 0 and stay in the mean",
                "average": "macro mean over the domain columns",
                "ties": "score descending, then document id descending (trec_eval)",
                "bytes_on_disk": "index storage; grid preview PNGs and rerank page cache excluded",
            },
            "quality": self.quality(),
            "metrics": {r.spec.text: r.metrics.mean for r in self.systems},
            "efficiency": self.efficiency(),
            "efficiency_reference": self.reference().spec.text,
            "breakdown": self.breakdown(),
            "systems": [
                {"spec": r.spec.text, "stats": r.stats.to_dict(), "per_query": r.metrics.per_query} for r in self.systems
            ],
        }

    def to_markdown(self) -> str:
        domains = self.domains()
        out = [
            f"# Evaluation: {self.dataset} ({self.split})",
            "",
            f"{len(self.queries)} queries; model: {self.model or 'n/a'}. Missing results count as 0; "
            "ties are broken by document id descending (trec_eval).",
            "",
            f"## Quality ({self.main_metric})",
            "",
            _table(
                ["system", *domains, "average"],
                [[row["system"], *(f"{row['domains'][d]:.3f}" for d in domains), f"{row['average']:.3f}"] for row in self.quality()],
            ),
            "",
            "Average: mean of the domain columns.",
            "",
            "## All metrics (mean over queries)",
            "",
        ]
        names = [metric_name(m, k) for m in METRICS for k in self.ks]
        out.append(_table(["system", *names], [[r.spec.text, *(f"{r.metrics.mean[n]:.3f}" for n in names)] for r in self.systems]))
        ref = self.reference().spec.text
        eff = self.efficiency()
        out += ["", "## Efficiency", ""]
        out.append(
            _table(
                ["system", *(label for _, label in _EFFICIENCY_COLUMNS)],
                [[row["system"] + (" (reused)" if row["reused"] else ""), *(_fmt(k, row[k]) for k, _ in _EFFICIENCY_COLUMNS)] for row in eff],
            )
        )
        out += ["", f"Relative to `{ref}`:", ""]
        out.append(
            _table(
                ["system", *(label for _, label in _EFFICIENCY_COLUMNS)],
                [
                    [row["system"], *("n/a" if row["ratio"][k] is None else f"{row['ratio'][k]:.3f}x" for k, _ in _EFFICIENCY_COLUMNS)]
                    for row in eff
                ],
            )
        )
        out += [
            "",
            "Bytes exclude grid preview PNGs and the rerank page cache. A reused index reports the timings "
            "recorded when it was built.",
        ]
        b = self.breakdown()
        if b is not None:
            c = b["counts"]
            out += [
                "",
                f"## Per-query outcomes: A = `{b['a']}`, B = `{b['b']}` (success: {b['success']})",
                "",
                _table(["outcome", "queries"], [["both succeed", str(c["both"])], ["only A", str(c["only_a"])],
                                                ["only B", str(c["only_b"])], ["both fail", str(c["neither"])]]),
            ]
        failed = [(r.spec.text, f) for r in self.systems for f in r.stats.failures]
        if failed:
            out += ["", "## Documents that could not be indexed", ""]
            out += [f"- `{spec}`: {f['reason']}" for spec, f in failed]
        return "\n".join(out) + "\n"

    def write(self, out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write ``report.md``, ``report.json`` and ``runs/<system>.trec`` (TREC run format)."""
        out = Path(out_dir)
        (out / "runs").mkdir(parents=True, exist_ok=True)
        md, js = out / "report.md", out / "report.json"
        md.write_text(self.to_markdown(), encoding="utf-8")
        js.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for r in self.systems:
            lines = []
            for q in self.queries:
                scores = r.run.get(q.query_id, {})
                for rank, doc in enumerate(rank_documents(scores), 1):
                    lines.append(f"{q.query_id} Q0 {doc} {rank} {scores[doc]:.6f} {r.spec.slug}")
            (out / "runs" / f"{r.spec.slug}.trec").write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
        return md, js
