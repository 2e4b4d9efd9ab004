"""Loss ablation: one labelled task trained with several losses over several seeds, scored on held-out data.

Why: whether multi-positive InfoNCE or the listwise term helps is a property of a
task, not of the method; a user with labelled documents can run the comparison on
theirs (``docpc train --ablation``) and read mean, spread and a paired verdict per
arm instead of one number per loss. An arm's seed s starts from the same weights as
every other arm's seed s, so arms are compared seed by seed.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docpc_retrievers.training.data import GridDataset
from docpc_retrievers.training.trainer import Trainer, TrainingConfig, evaluate_ndcg

__all__ = ["AblationArm", "AblationReport", "default_arms", "paired_verdict", "run_ablation"]

logger = logging.getLogger(__name__)

#: Metrics every run reports (held-out).
METRICS = ("ndcg@5", "recall@10")


@dataclass(frozen=True)
class AblationArm:
    """One row of the ablation: a loss, and for the combined loss how often its listwise term applies."""

    name: str
    loss: str
    listwise_every: int | None = None

    def config(self, base: TrainingConfig, seed: int) -> TrainingConfig:
        """``base`` with this arm's loss and the seed."""
        changes: dict[str, Any] = {"loss": self.loss, "seed": seed}
        if self.listwise_every is not None:
            changes["listwise_every"] = self.listwise_every
        return dataclasses.replace(base, **changes)


def default_arms(every: Sequence[int] = (2, 10, 40)) -> list[AblationArm]:
    """InfoNCE, MP-InfoNCE, listwise alone, and the combined loss at each m in ``every``."""
    arms = [AblationArm("infonce", "infonce"), AblationArm("mp-infonce", "mp-infonce"),
            AblationArm("listwise", "listwise")]
    return arms + [AblationArm(f"combined m={m}", "combined", m) for m in every]


def paired_verdict(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Mean and standard error of the seed-by-seed differences ``a - b``, and which is higher by more than 2 SE."""
    diffs = [x - y for x, y in zip(a, b)]
    if len(diffs) < 2:
        return {"mean_difference": diffs[0] if diffs else float("nan"), "standard_error": float("nan"),
                "seeds": len(diffs), "verdict": "too few seeds"}
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if se == 0.0:
        verdict = "no difference" if mean == 0.0 else ("first higher" if mean > 0 else "second higher")
    elif mean > 2 * se:
        verdict = "first higher"
    elif mean < -2 * se:
        verdict = "second higher"
    else:
        verdict = "no detectable difference"
    return {"mean_difference": mean, "standard_error": se, "seeds": len(diffs), "verdict": verdict}


@dataclass
class AblationReport:
    """Every run's held-out scores; :meth:`summary` and :meth:`comparisons` aggregate them."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    comparisons_asked: list[tuple[str, str, str]] = field(default_factory=list)

    def scores(self, arm: str, metric: str) -> list[float]:
        """One arm's values of a metric, in seed order."""
        return [r[metric] for r in sorted(self.runs, key=lambda r: r["seed"]) if r["arm"] == arm]

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per arm and metric: mean, standard deviation (0 for one seed), min, max and seed count."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for arm in dict.fromkeys(r["arm"] for r in self.runs):
            out[arm] = {}
            for metric in METRICS:
                values = self.scores(arm, metric)
                out[arm][metric] = {"mean": statistics.fmean(values),
                                    "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                                    "min": min(values), "max": max(values), "seeds": len(values)}
        return out

    def comparisons(self) -> list[dict[str, Any]]:
        """The asked paired comparisons ``(first arm, second arm, metric)`` with their verdicts."""
        rows = []
        for first, second, metric in self.comparisons_asked:
            a, b = self.scores(first, metric), self.scores(second, metric)
            if a and b:
                rows.append({"first": first, "second": second, "metric": metric, **paired_verdict(a, b)})
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: runs, summary and comparisons."""
        return {"runs": self.runs, "summary": self.summary(), "comparisons": self.comparisons()}

    def to_markdown(self) -> str:
        """The per-arm table (mean ± sd, min-max) and the paired comparisons, as Markdown."""
        summary = self.summary()
        seeds = sorted({r["seed"] for r in self.runs})
        lines = [f"Held-out scores over {len(seeds)} seeds ({', '.join(str(s) for s in seeds)}): mean ± sd (min-max).", "",
                 "| arm | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
        for arm, metrics in summary.items():
            cells = [f"{m['mean']:.3f} ± {m['std']:.3f} ({m['min']:.3f}-{m['max']:.3f})" for m in metrics.values()]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        rows = self.comparisons()
        if rows:
            lines += ["", "| comparison | metric | mean difference | standard error | verdict (2 SE) |",
                      "|---|---|---|---|---|"]
            for c in rows:
                verdict = {"first higher": f"{c['first']} higher", "second higher": f"{c['second']} higher"}.get(
                    c["verdict"], c["verdict"])
                lines.append(f"| {c['first']} vs {c['second']} | {c['metric']} | {c['mean_difference']:+.3f} | "
                             f"{c['standard_error']:.3f} | {verdict} |")
        return "\n".join(lines) + "\n"


def run_ablation(
    model_for_seed: Callable[[int], str | Path],
    train: GridDataset,
    held_out: GridDataset,
    base: TrainingConfig,
    *,
    arms: Sequence[AblationArm] | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    work_dir: str | Path,
    comparisons: Sequence[tuple[str, str, str]] = (("mp-infonce", "infonce", "recall@10"),
                                                   ("mp-infonce", "infonce", "ndcg@5"),
                                                   ("combined m=10", "mp-infonce", "ndcg@5")),
    on_run: Callable[[dict[str, Any]], None] | None = None,
) -> AblationReport:
    """Train every arm from ``model_for_seed(seed)`` for every seed; score each on ``held_out``.

    Each run's checkpoint is written under ``work_dir`` and deleted once scored. ``on_run`` sees
    each run's row as it finishes (progress). Returns an :class:`AblationReport`.
    """
    from docpc_retrievers.encoders import ColPaliEncoder

    chosen = list(arms) if arms is not None else default_arms()
    report = AblationReport(comparisons_asked=list(comparisons))
    root = Path(work_dir)
    for seed in seeds:
        model = model_for_seed(seed)
        for arm in chosen:
            out = root / f"{arm.name.replace(' ', '_').replace('=', '')}-seed{seed}"
            started = time.perf_counter()
            result = Trainer(model, train, out, arm.config(base, seed), cache_dir=False).train()
            scored = evaluate_ndcg(ColPaliEncoder(out, device=base.device or "cpu", dtype="float32"), held_out, k=5)
            row = {"arm": arm.name, "loss": arm.loss, "listwise_every": arm.listwise_every, "seed": seed,
                   "steps": result.step, "seconds": time.perf_counter() - started,
                   **{m: float(scored[m]) for m in METRICS}}
            report.runs.append(row)
            shutil.rmtree(out, ignore_errors=True)
            logger.info("%s seed %d: NDCG@5 %.3f, recall@10 %.3f", arm.name, seed, row["ndcg@5"], row["recall@10"])
            if on_run is not None:
                on_run(row)
    return report
