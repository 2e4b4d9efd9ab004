"""Snapshots of a first stage in the cache: a folder per save, named atomically in ``current.json``.

A save writes a new ``snap-*`` folder (the backend's own files, the document
ids, the caller's extra arrays and ``meta.json``), then points
``current.json`` at it with an atomic rename: a reader opening meanwhile sees
the old snapshot or the new one, never half. Older folders are removed (a
process that mapped one keeps its pages until it closes).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["new_snapshot", "publish_snapshot", "read_snapshot"]

_OLD_ID_WIDTH = 64
"""Snapshots written before ``whole_ids`` stored ids in 64 characters: one that long may be a longer id cut short."""


def new_snapshot(folder: Path) -> Path:
    """An empty snapshot folder under ``folder`` for the backend to write its files into."""
    folder.mkdir(parents=True, exist_ok=True)
    snap = folder / f"snap-{os.getpid()}-{secrets.token_hex(4)}"
    snap.mkdir()
    return snap


def publish_snapshot(snap: Path, ids: Sequence[str], meta: Mapping[str, Any],
                     extras: Mapping[str, np.ndarray] | None = None) -> None:
    """Write ids, extras and ``meta`` into ``snap``, make it current, and remove the older snapshots."""
    folder = snap.parent
    np.save(snap / "ids.npy", np.array(list(ids), dtype=str))
    for name, array in (extras or {}).items():
        np.save(snap / f"x-{name}.npy", array)
    (snap / "meta.json").write_text(
        json.dumps({**meta, "n": len(ids), "extras": sorted(extras or {}), "whole_ids": True}))
    tmp = folder / f".current-{os.getpid()}.json"
    tmp.write_text(json.dumps({"snapshot": snap.name}))
    os.replace(tmp, folder / "current.json")
    for old in folder.glob("snap-*"):
        if old != snap:
            shutil.rmtree(old, ignore_errors=True)


def read_snapshot(folder: Path) -> tuple[Path, dict[str, Any], list[str], dict[str, np.ndarray]]:
    """The current snapshot's folder, meta, ids and extras (OSError, ValueError or KeyError when unusable)."""
    snap = folder / json.loads((folder / "current.json").read_text())["snapshot"]
    meta = json.loads((snap / "meta.json").read_text())
    ids = [str(i) for i in np.load(snap / "ids.npy").tolist()]
    if len(ids) != int(meta["n"]):
        raise ValueError(f"snapshot {snap} names {meta['n']} documents but lists {len(ids)}")
    if not meta.get("whole_ids") and any(len(i) == _OLD_ID_WIDTH for i in ids):
        raise ValueError(f"snapshot {snap} is from before 0.3, which cut ids at {_OLD_ID_WIDTH} characters")
    extras = {name: np.load(snap / f"x-{name}.npy") for name in meta.get("extras", [])}
    return snap, meta, ids, extras
