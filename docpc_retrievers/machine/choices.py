"""Choices made for speed, timed once on this machine and remembered outside any store.

Which int8 kernel multiplies fastest, whether the approximate pass gains from threads: the answers differ by CPU
kind by factors of 20-200 in either direction, so no fixed rule is safe. Each choice times its candidates once on
a small fixed problem (interleaved rounds, the best round of each, so a busy moment slows every candidate alike),
keeps the preferred candidate unless another is faster by a clear margin, and writes the result to a JSON file
keyed by the machine (CPU model, flags, cores, torch and package versions). A store moved to another machine is
searched with that machine's choices; a missing or unreadable file means timing again, never a per-query check.
Each choice can be forced by an environment variable (``DOCPC_INT8_KERNEL=int_mm``, say) for a bug report.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from docpc_retrievers.machine.cpu import this_cpu

__all__ = ["CACHE_ENV", "Choice", "cache_dir", "cache_file", "forget", "machine_identity", "remembered",
           "time_runs", "timed_choice"]

logger = logging.getLogger(__name__)

CACHE_ENV = "DOCPC_CACHE_DIR"
"""Where the per-machine choices live (default: the user's cache folder); an empty value keeps them in memory."""
GIVE_UP = 20.0
"""A candidate whose timed run is this many times slower than the best so far is not timed again: it has lost,
and a catastrophic kernel (seconds a call) should not make the one-time check long."""
GIVE_UP_FIRST = 100.0
"""The same after the untimed first run, which may carry one-time costs (loading a library, packing)."""

_LOCK = threading.Lock()
_MEMO: dict[str, Any] = {}
_DECIDING: dict[str, threading.Lock] = {}
"""One lock per entry, held while it is computed: a choice's timing may itself need another choice (the threads'
runs multiply through the int8 kernel) on other threads, so no lock is shared between entries."""


def _entry_lock(name: str) -> threading.Lock:
    with _LOCK:
        return _DECIDING.setdefault(name, threading.Lock())


@dataclass(frozen=True)
class Choice:
    """What was chosen for one decision, and why."""

    name: str
    choice: str
    how: str
    """``timed`` (now), ``cached`` (timed earlier on this machine), ``forced`` (an environment variable) or
    ``only`` (one candidate works here)."""
    timings_ms: dict[str, float | None] = field(default_factory=dict)
    """Each candidate's best round in ms; None where it failed here or was given up after its first run."""
    margin: float = 1.0
    preferred: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_dir() -> Path | None:
    """docpc-retrievers' cache folder for this user (``DOCPC_CACHE_DIR`` first; None when that is set empty)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return Path(env).expanduser() if env else None
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "docpc-retrievers"


def machine_identity() -> dict[str, Any]:
    """What the cached choices depend on: the CPU, and the versions of the code that runs the kernels."""
    import torch

    from docpc_retrievers import __version__

    return {"cpu": this_cpu().to_dict(), "torch": torch.__version__, "docpc_retrievers": __version__}


def cache_file() -> Path | None:
    """This machine's choices file (None where choices are kept in memory only)."""
    folder = cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256(json.dumps(machine_identity(), sort_keys=True).encode()).hexdigest()[:16]
    return folder / "machine" / f"{key}.json"


def _read(path: Path | None) -> dict[str, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return data.get("entries", {}) if isinstance(data, dict) else {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring the unreadable machine choices file %s (%s); timing again", path, exc)
        return {}


def _write(name: str, value: Any) -> None:
    """Add one entry to this machine's file (read, merge, replace atomically; a failure keeps it in memory)."""
    path = cache_file()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = {**_read(path), name: value}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"machine": machine_identity(), "entries": entries}, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("could not save machine choices to %s (%s); they hold for this process only", path, exc)


def forget() -> None:
    """Drop this process's remembered choices (the file stays): the next use reads the file again, or times anew."""
    _MEMO.clear()


def remembered(name: str, compute: Callable[[], Any]) -> Any:
    """A JSON value about this machine computed once (a kernel's exactness, say) and then read from its file."""
    if name in _MEMO:
        return _MEMO[name]
    with _entry_lock(name):
        if name not in _MEMO:
            entries = _read(cache_file())
            value = entries[name] if name in entries else compute()
            if name not in entries:
                _write(name, value)
            _MEMO[name] = value
        return _MEMO[name]


def time_runs(candidates: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, float | None]:
    """Each candidate's best of ``rounds`` interleaved runs in ms, after one untimed run (None: it failed).

    A candidate :data:`GIVE_UP` times slower than the best so far (:data:`GIVE_UP_FIRST` after the first run, and
    again after one more run to confirm it) is not run again: its time so far stands.
    """
    best: dict[str, float | None] = {}
    for name, run in candidates.items():
        start = time.perf_counter()
        try:
            run()
            best[name] = (time.perf_counter() - start) * 1e3  # the first run, in case it is the only one
        except (RuntimeError, TypeError, AttributeError, NotImplementedError) as exc:  # a kernel this build or CPU lacks
            logger.debug("%s unavailable here: %s", name, exc)
            best[name] = None
    timed: set[str] = set()
    lost = _far_behind(best, GIVE_UP_FIRST)
    for name in sorted(lost):  # one slow run may be a busy moment, not the kernel: confirm before giving up on it
        start = time.perf_counter()
        candidates[name]()
        best[name] = min(best[name], (time.perf_counter() - start) * 1e3)  # type: ignore[type-var]
    lost = _far_behind(best, GIVE_UP_FIRST)
    for _ in range(rounds):
        for name, run in candidates.items():
            if best[name] is None or name in lost:
                continue
            start = time.perf_counter()
            run()
            elapsed = (time.perf_counter() - start) * 1e3
            best[name] = elapsed if name not in timed else min(best[name], elapsed)  # type: ignore[type-var]
            timed.add(name)
            fastest = min(best[n] for n in timed)  # type: ignore[type-var]
            lost |= {n for n in timed if best[n] > GIVE_UP * fastest}  # type: ignore[operator]
    return best


def _far_behind(best: Mapping[str, float | None], factor: float) -> set[str]:
    """The candidates more than ``factor`` times slower than the fastest (failed ones aside)."""
    usable = [v for v in best.values() if v is not None]
    return {n for n, t in best.items() if t is not None and usable and t > factor * min(usable)}


def timed_choice(name: str, candidates: Sequence[str], runs: Callable[[], Mapping[str, Callable[[], object]]], *,
                 preferred: str, margin: float = 1.5, rounds: int = 5, env: str | None = None) -> Choice:
    """The candidate to use for ``name`` on this machine: ``preferred`` unless another is more than ``margin``
    times faster on the candidates' fixed problem; timed once per machine, then read from the cache file.

    ``runs()`` builds the problem and returns one run per candidate; it is called only when timing. ``env`` names
    an environment variable that forces the choice (it must name a candidate).
    """
    forced = os.environ.get(env, "").strip() if env else ""
    if forced:
        if forced not in candidates:
            raise ValueError(f"{env}={forced!r} is not one of {', '.join(candidates)}")
        return Choice(name, forced, "forced", margin=margin, preferred=preferred)
    key = f"choice:{name}"
    if key in _MEMO:
        return _MEMO[key]
    with _entry_lock(key):
        if key in _MEMO:
            return _MEMO[key]
        saved = _read(cache_file()).get(key)
        if isinstance(saved, dict) and saved.get("choice") in candidates and set(saved.get("timings_ms", {})) == set(
                candidates):
            choice = Choice(**{**saved, "how": "cached"})
        else:
            choice = _decide(name, runs(), preferred, margin, rounds)
            _write(key, choice.to_dict())
        _MEMO[key] = choice
        return choice


def _decide(name: str, candidates: Mapping[str, Callable[[], object]], preferred: str, margin: float,
            rounds: int) -> Choice:
    timings = time_runs(candidates, rounds)
    usable = {k: v for k, v in timings.items() if v is not None}
    if not usable:
        raise RuntimeError(f"no candidate for {name} works on this machine: {', '.join(candidates)}")
    fastest = min(usable, key=usable.__getitem__)
    pick = preferred if preferred in usable and usable[preferred] <= margin * usable[fastest] else fastest
    kept = {k: (round(v, 4) if k in usable else None) for k, v in timings.items()}
    how = "only" if len(usable) == 1 else "timed"
    logger.info("%s: %s on this machine (%s)", name, pick,
                ", ".join(f"{k} {v:.2f} ms" if v is not None else f"{k} -" for k, v in kept.items()))
    return Choice(name, pick, how, kept, margin, preferred)
