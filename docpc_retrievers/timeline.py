"""Where an indexing run's time went: each stage's busy spans and the queues' depths over time.

Indexing overlaps rendering (worker processes), preparing images, the encoder's forward passes and the store's
commits; a run slower than its slowest stage is losing time to some stage waiting on another. Handed to
:meth:`DocPCIndex.add_pdfs` as ``timeline=``, a :class:`Timeline` records every span of every lane and samples
the queues, and :meth:`Timeline.summary` says how busy each lane was over the run (benchmarks print it; tests use
it to check the stages overlap). Recording costs a list append per span; no run records one unless asked.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Timeline"]


class Timeline:
    """Spans ``(lane, start, end)`` and depth samples ``(name, time, value)``, in ``time.perf_counter`` seconds."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.ended: float | None = None
        self.spans: list[tuple[str, float, float]] = []
        self.depths: list[tuple[str, float, int]] = []
        self._lock = threading.Lock()

    def span(self, lane: str, start: float, end: float) -> None:
        """Record that ``lane`` was busy from ``start`` to ``end``."""
        with self._lock:
            self.spans.append((lane, start, end))

    @contextmanager
    def busy(self, lane: str) -> Iterator[None]:
        """Record the block as one span of ``lane``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.span(lane, start, time.perf_counter())

    def depth(self, name: str, value: int) -> None:
        """Sample a queue's depth now."""
        with self._lock:
            self.depths.append((name, time.perf_counter(), value))

    def end(self) -> None:
        """Mark the run's end (the summary's wall time runs from creation to here)."""
        self.ended = time.perf_counter()

    def summary(self) -> dict[str, Any]:
        """Per lane: busy seconds (overlapping spans counted once), share of the wall time, spans; per queue: mean
        and max depth. Lanes named ``name:n`` (one per render worker) are also summed as ``name`` (busy seconds over
        all of them, share of one lane's time)."""
        end = self.ended if self.ended is not None else time.perf_counter()
        wall = max(end - self.started, 1e-9)
        by_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
        with self._lock:
            spans, depths = list(self.spans), list(self.depths)
        for lane, start, stop in spans:
            by_lane[lane].append((start, stop))
        lanes: dict[str, dict[str, float]] = {}
        groups: dict[str, list[float]] = defaultdict(list)
        for lane, items in sorted(by_lane.items()):
            busy = _union(items)
            lanes[lane] = {"busy_s": round(busy, 3), "share": round(busy / wall, 3), "spans": len(items)}
            if ":" in lane:
                groups[lane.split(":", 1)[0]].append(busy)
        for name, busies in groups.items():
            lanes[name] = {"busy_s": round(sum(busies), 3), "share": round(sum(busies) / (wall * len(busies)), 3),
                           "lanes": len(busies)}
        queues: dict[str, dict[str, float]] = {}
        by_queue: dict[str, list[int]] = defaultdict(list)
        for name, _, value in depths:
            by_queue[name].append(value)
        for name, values in sorted(by_queue.items()):
            queues[name] = {"mean": round(sum(values) / len(values), 2), "max": max(values), "samples": len(values)}
        first = min((s for s, _ in (x for v in by_lane.values() for x in v)), default=self.started)
        return {"wall_s": round(wall, 3), "first_span_s": round(first - self.started, 3), "lanes": lanes,
                "queues": queues}

    def headline(self, lanes: int = 6) -> str:
        """The busiest lanes as one line, e.g. ``encode.forward 64%, commit 61%, render 33% (14 workers)``."""
        summary = self.summary()
        shares = [(v["share"], name, v.get("lanes")) for name, v in summary["lanes"].items() if ":" not in name]
        shares.sort(key=lambda item: (-item[0], item[1]))
        parts = [f"{name} {share:.0%}" + (f" ({count} workers)" if count else "")
                 for share, name, count in shares[:lanes]]
        return f"{', '.join(parts)} of {summary['wall_s']:.1f} s"

    def write(self, path: str | os.PathLike[str]) -> None:
        """Save the summary and every span and depth sample as JSON (times in seconds from the start)."""
        Path(path).write_text(json.dumps({"summary": self.summary(), **self.to_dict()}))

    def to_dict(self) -> dict[str, Any]:
        """Everything recorded, times relative to the start (for plotting)."""
        with self._lock:
            return {
                "spans": [(lane, round(s - self.started, 4), round(e - self.started, 4)) for lane, s, e in self.spans],
                "depths": [(name, round(t - self.started, 4), v) for name, t, v in self.depths],
            }


def _union(items: list[tuple[float, float]]) -> float:
    """Seconds covered by the spans, overlaps counted once."""
    total, reach = 0.0, float("-inf")
    for start, stop in sorted(items):
        if stop <= reach:
            continue
        total += stop - max(start, reach)
        reach = stop
    return total
