"""The systems search_bench.py compares, each built over the same stored rows: a query and an allowed set in,
ids best first out.

* ``scan``: the exhaustive int8 scan (every allowed document's rows, the best 64 again in float32);
* ``search``: the store's search with its default configuration;
* ``search:KEY=VALUE,...``: the same with settings changed (``SearchConfig`` fields);
* ``legacy``, ``legacy-no-tokens``, ``legacy-no-ties``, ``legacy-no-follow-up``, ``legacy-scan``: the two-stage
  search as it stood before the rewrite, whole, without one stage, and its exhaustive approximate pass (run with
  ``PYTHONPATH`` pointing at a checkout of that commit, e.g. ``git worktree add /tmp/legacy c9136a2``).
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

Search = Callable[[np.ndarray, "set[str] | None"], list[str]]


def build(name: str, rows: Any, ids: list[str], vectors: list[np.ndarray]) -> Search:
    if name == "scan" or name.startswith("search"):
        return _current(name, rows, ids, vectors)
    return _legacy(name, rows, ids, vectors)


def _current(name: str, rows: Any, ids: list[str], vectors: list[np.ndarray]) -> Search:
    from docpc_retrievers.store.search import SearchConfig, backend_for, document_centroids

    settings: dict[str, Any] = {}
    if ":" in name:
        for item in name.split(":", 1)[1].split(","):
            key, value = item.split("=")
            settings[key] = type(getattr(SearchConfig(), key))(value)
    kind = "scan" if name == "scan" else "centroids"
    config = SearchConfig(**settings)
    backend = backend_for(kind, rows, dim=vectors[0].shape[1], config=config)
    for s in range(0, len(ids), 1000):
        backend.add(ids[s : s + 1000], [document_centroids(v, config.n_centroids) for v in vectors[s : s + 1000]])
    saved = tempfile.mkdtemp(prefix="search-bench-")
    atexit.register(shutil.rmtree, saved, ignore_errors=True)
    backend.save(Path(saved))  # searched as a store searches: the saved snapshot

    def search(q: np.ndarray, allowed: set[str] | None) -> list[str]:
        return [h.id for h in backend.search(q, 10, allowed)]

    return search


@contextlib.contextmanager
def _patched(module: Any, **values: Any) -> Iterator[None]:
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def _legacy(name: str, rows: Any, ids: list[str], vectors: list[np.ndarray]) -> Search:
    from docpc_retrievers.store.search.tokens import TokenIndex

    from docpc_retrievers.store.search import two_stage
    from docpc_retrievers.store.search.centroids import (
        CentroidIndex,
        document_centroids,
    )

    dim = vectors[0].shape[1]
    index = CentroidIndex(16, dim)
    for s in range(0, len(ids), 1000):
        index.add(ids[s : s + 1000], [document_centroids(v, 16) for v in vectors[s : s + 1000]])
    tokens = None
    if name not in ("legacy-no-tokens", "legacy-scan"):
        tokens = TokenIndex(dim)
        for s in range(0, len(ids), 2000):
            tokens.add(ids[s : s + 2000], [r.astype(np.float32) * c.astype(np.float32)[:, None]
                                            for r, c in (rows.doc_rows(d) for d in ids[s : s + 2000])])
        tokens.freeze()
    engine = two_stage.TwoStageSearch(index, rows, 256, token_stage=(lambda: tokens) if tokens else None)
    if name == "legacy-scan":  # its approximate pass over every allowed document, the best 64 exactly
        from docpc_retrievers.store.search.query_tokens import distinct_tokens

        def scan(q: np.ndarray, allowed: set[str] | None) -> list[str]:
            pool = ids if allowed is None else list(allowed)
            return [d for _, d, _ in engine._scored(q, pool, 10, False, "max", distinct=distinct_tokens(q))]

        return scan
    patch = {"legacy-no-ties": {"NEAR_TIE_FACTOR": 0}, "legacy-no-follow-up": {"FOLLOW_UP_DEPTH": 2.0}}.get(name, {})

    def search(q: np.ndarray, allowed: set[str] | None) -> list[str]:
        with _patched(two_stage, **patch):
            hits = engine.search(q, ids if allowed is None else list(allowed), allowed, 10,
                                 metadata=lambda found: {d: {} for d in found})
        return [h[0] for h in hits]

    return search
