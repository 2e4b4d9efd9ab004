"""The token-level first stage: every stored vector in a faiss IVF index, for queries too short for summaries.

With a few query tokens about a popular topic, thousands of documents have a
centroid equally close to every token, and which ten score highest is decided
by single vectors (benchmarks/first_stage_bench.py: 16-centroid summaries keep
0.77 of the exact top 10 at 256 candidates, this index 0.99). Each stored
vector sits in an inverted-file index as 4-bit product-quantizer codes of its
offset from its list's centroid, one sub-quantizer per dimension (64 bytes
per 128-dim vector), scanned by faiss's fast-scan kernels; each is labelled
with its document's slot. A query
token's nearest vectors vote for their documents by late interaction: per
document, the sum over query tokens of its best retrieved similarity, or that
token's worst retrieved one when none of its vectors came back.

The saved index is opened as a memory map (read-only, packed_lists.py):
documents added since go to an in-memory index sharing its training,
documents removed are hidden by slot; a save writes both into a new file.
On the benchmark's 100k store the fast-scan codes answered a short query's
token search in 37 ms against 258 ms for the 4-bit scalar codes used before
(version 1), at the same share of the exact top 10 (docs/store.md). Needs ``faiss-cpu``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.store.search.base import CandidateIndex
from docpc_retrievers.store.search.packed_lists import (
    layout_of,
    list_entries,
    list_labels,
    pad_codes,
    quiet_stdout,
    write_lists,
)
from docpc_retrievers.store.search.snapshot import (
    new_snapshot,
    publish_snapshot,
    read_snapshot,
)

__all__ = ["TokenIndex", "faiss_available"]

logger = logging.getLogger(__name__)

N_LISTS = 2048
"""Inverted lists (k-means cells over the vectors)."""
N_PROBE = 128
"""Lists scanned per query token (6% of them)."""
PER_TOKEN = 4096
"""Nearest vectors retrieved per query token (scanning the probed lists is the cost, not keeping their best; 16,384
and 1,024 were measured: docs/store.md)."""
SPLIT_MIN_PROBES = 16
"""An odd number of query tokens scanning at least this many lists each is searched in two halves per token
(:func:`_split_search`), so both of a 2-core machine's threads scan; fewer lists are not worth the merge."""
TRAIN_MIN = 40 * N_LISTS
"""Vectors needed before the lists are trained; below that, every vector is scored exactly."""
RETRAIN_GROWTH = 8
"""An index holding this many times the documents its lists were trained on is retrained (``outgrown``): lists trained
on a store's first few hundred documents fit that first batch, not the store (`chroma run`, 100k documents added in
order: short queries 0.96 of the exact top 10, against 0.99 for lists trained on a random sample)."""
_VERSION = 3
"""3: product-quantizer codes of each vector's residual from its list's centroid. On the benchmark's 100k store
(the same lists, the same scan) a short query's best 1,024 documents held 0.990 of its exact top 10 against 0.986
for codes of the vectors themselves, queries copied from a document 0.998 against 0.994, and 8-12-token hard queries
0.994 against 0.988 (docs/store.md). 2: codes of the vectors themselves; 1: 4-bit scalar codes in faiss's own mapped
lists. An older snapshot is rebuilt from the stored vectors on first need."""
_INDEX, _LISTS, _TRAINED = "ivf.faiss", "lists.ivfdata", "trained.faiss"


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


class TokenIndex(CandidateIndex):
    """Document vectors ``[n_i, dim]`` in, documents whose single vectors best match the query tokens out."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._ids: list[str] = []
        self._slot: dict[str, int] = {}
        self._dead: set[int] = set()
        self._base: Any = None  # the mapped, read-only saved index
        self._delta: Any = None  # trained, in memory: documents added since the save
        self._frozen: list[Any] = []  # in memory, closed to additions (freeze): searched while another thread adds
        self._trained: np.ndarray | None = None  # the trained, empty index, serialized: new deltas and saves start from it
        self.trained_on = 0
        """Documents the lists were trained to represent (those present at training, or a rebuild's whole store)."""
        self._pending: list[tuple[int, np.ndarray]] = []  # before training: (slot, vectors)
        self._sizes: np.ndarray | None = None  # vectors per list, mapped and added (None: count again)
        self.changed = False
        """Documents added or removed since the index was last saved or loaded (a save rewrites every list)."""
        self.covered: frozenset[str] = frozenset()
        """A view's documents (:meth:`view`): a caller finds the rest of the store elsewhere."""

    def __len__(self) -> int:
        return len(self._slot)

    def ids(self) -> list[str]:
        return list(self._slot)

    @property
    def outgrown(self) -> bool:
        """Trained on a small part of what it now holds (``RETRAIN_GROWTH``): worth rebuilding from the stored vectors."""
        return self.trained and len(self._slot) >= RETRAIN_GROWTH * max(self.trained_on, 1)

    @property
    def trained(self) -> bool:
        return self._delta is not None

    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray]) -> None:
        """Add or replace documents from their stored vectors (``[n_i, dim]`` float32 each)."""
        self.remove(ids)
        self.changed = self.changed or bool(ids)
        batch = []
        for doc_id, vectors in zip(ids, summaries):
            slot = len(self._ids)
            self._ids.append(doc_id)
            self._slot[doc_id] = slot
            batch.append((slot, np.ascontiguousarray(vectors, dtype=np.float32)))
        if self._delta is None:
            self._pending.extend(batch)
            if sum(len(v) for _, v in self._pending) >= TRAIN_MIN:
                self._train()
        elif batch:
            self._add_to(self._delta, batch)
            self._sizes = None

    def freeze(self) -> None:
        """Close the in-memory documents to additions (later ones go to a new part sharing the training), so that
        :meth:`view` can hand them to another thread while this one goes on adding."""
        import faiss

        if self._delta is not None and self._delta.ntotal and self._trained is not None:
            self._frozen.append(self._delta)
            self._delta = faiss.deserialize_index(self._trained)
            self._sizes = None

    def view(self, coverage: float) -> TokenIndex:
        """What this index holds now, frozen (:meth:`freeze`), as a searchable copy sharing its faiss parts (never
        added to again): queries search it while a background build goes on adding to this index. Trained indexes
        only. ``coverage``: the share of the store it holds."""
        import faiss

        if self._delta is None or self._trained is None:
            raise ValueError("an untrained token index has no view (its few vectors are scored exactly)")
        self.freeze()
        view = TokenIndex(self.dim)
        view._ids, view._slot, view._dead = list(self._ids), dict(self._slot), set(self._dead)
        view._base, view._frozen, view._trained = self._base, list(self._frozen), self._trained
        view._delta = faiss.deserialize_index(self._trained)  # empty: its quantizer places the query tokens
        view.trained_on, view.coverage, view.covered = self.trained_on, coverage, frozenset(view._slot)
        return view

    def remove(self, ids: Iterable[str]) -> None:
        for doc_id in ids:
            slot = self._slot.pop(doc_id, None)
            if slot is not None:
                self._dead.add(slot)
                self.changed = True
        if self._pending and self._dead:
            self._pending = [(s, v) for s, v in self._pending if s not in self._dead]

    def _train(self) -> None:
        import faiss

        vectors = np.concatenate([v for _, v in self._pending])
        sample = vectors[np.random.default_rng(0).permutation(len(vectors))[: 64 * N_LISTS]]
        index = faiss.IndexIVFPQFastScan(faiss.IndexFlatIP(self.dim), self.dim, N_LISTS, self.dim, 4,
                                         faiss.METRIC_INNER_PRODUCT)
        index.by_residual = True  # codes of each vector's offset from its list's centroid (_VERSION)
        index.train(sample)
        self._trained = faiss.serialize_index(index)
        self.trained_on = len(self._slot)
        self._delta = index
        self._add_to(index, self._pending)
        self._pending = []
        self._sizes = None

    @staticmethod
    def _add_to(index: Any, batch: Sequence[tuple[int, np.ndarray]]) -> None:
        if batch:
            vectors = np.concatenate([v for _, v in batch])
            labels = np.concatenate([np.full(len(v), s, dtype=np.int64) for s, v in batch])
            index.add_with_ids(vectors, labels)

    # ----------------------------------------------------------------- search
    def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, probes: int | None = None,
            per_token: int | None = None, distinct_codes: int | None = None) -> list[str]:
        """The ``n`` documents with the highest pooled token similarity for ``query [t, dim]`` (``probes`` lists
        scanned per token, None: ``N_PROBE``; ``per_token`` nearest vectors kept per token, None: ``PER_TOKEN``;
        ``distinct_codes``: fewer lists per token where the tokens' lists together would hold more vectors than
        this, :meth:`probes_within`)."""
        keep = per_token or PER_TOKEN
        if n <= 0 or not self._slot:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32)
        if distinct_codes is not None and self._delta is not None:
            probes = self.probes_within(q, probes or N_PROBE, distinct_codes)
        slots = None if allowed is None else np.array([self._slot[d] for d in allowed if d in self._slot], np.int64)
        if slots is not None and slots.size == 0:
            return []
        found = [self._search(index, q, slots, probes or N_PROBE, keep) for index in self._parts() if index.ntotal]
        wanted = None if slots is None else set(slots.tolist())
        pending = [(s, v) for s, v in self._pending if wanted is None or s in wanted]
        if pending:  # untrained: every vector, exactly
            vectors = np.concatenate([v for _, v in pending])
            labels = np.concatenate([np.full(len(v), s, dtype=np.int64) for s, v in pending])
            sims = q @ vectors.T
            k = min(keep, sims.shape[1])
            part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            found.append((np.take_along_axis(sims, part, axis=1), labels[part]))
        if not found:
            return []
        vals = np.concatenate([f[0] for f in found], axis=1)
        labels = np.concatenate([f[1] for f in found], axis=1)
        score = _pooled(vals, labels, len(self._ids), self._dead)
        seen = np.flatnonzero(score > -np.inf)
        best = seen[np.argsort(-score[seen], kind="stable")[:n]]
        return [self._ids[s] for s in best]

    def probes_within(self, query: np.ndarray, probes: int, distinct_codes: int) -> int:
        """The most lists per token, at most ``probes``, whose union over ``query [t, dim]``'s tokens holds at most
        ``distinct_codes`` vectors (at least 1 list).

        Why: the scan reads memory as fast as the machine allows, so its cost follows the distinct codes a query
        reads, not its lists per token. Tokens drawn around one topic share about half their nearest lists; tokens
        copied from one document's rows point different ways and share a quarter, and tokens near a crowded
        direction land in lists several times the mean (docs/store.md, "Short queries read a bounded share").
        """
        _, lists = self._delta.quantizer.search(query, min(probes, self._delta.nlist))
        sizes = self._list_sizes()
        lo, hi = 1, lists.shape[1]
        while lo < hi:  # the union only grows with the lists per token
            mid = (lo + hi + 1) // 2
            if int(sizes[np.unique(lists[:, :mid])].sum()) <= distinct_codes:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _list_sizes(self) -> np.ndarray:
        """Vectors per list ``[nlist]``, mapped and added together (remembered until the next change)."""
        if self._sizes is None:
            parts = self._parts()
            self._sizes = np.array([sum(index.invlists.list_size(lst) for index in parts)
                                    for lst in range(self._delta.nlist)], dtype=np.int64)
        return self._sizes

    def _parts(self) -> list[Any]:
        """The faiss indexes holding this index's vectors: the mapped save, the frozen parts, the one added to."""
        return [index for index in (self._base, *self._frozen, self._delta) if index is not None]

    @staticmethod
    def _search(index: Any, q: np.ndarray, slots: np.ndarray | None, probes: int,
                keep: int = PER_TOKEN) -> tuple[np.ndarray, np.ndarray]:
        """Each query token's ``keep`` nearest vectors in ``probes`` lists: similarities and slots, ``[t, keep]``."""
        import faiss

        k, probes = min(keep, max(index.ntotal, 1)), min(probes, index.nlist)
        if (len(q) % 2 == 0 or probes < SPLIT_MIN_PROBES or probes + probes % 2 > index.nlist
                or faiss.omp_get_max_threads() < 2):
            vals, labels = index.search(q, k, params=_search_params(probes, slots))
            return vals, labels
        return _split_search(index, q, slots, probes, k)

    # ------------------------------------------------------------ persistence
    def save(self, folder: Path, extras: Mapping[str, np.ndarray] | None = None) -> None:
        """Write live vectors' codes (mapped and added) into one new mapped index, then map it back."""
        import faiss

        if self._delta is None or self._trained is None:  # untrained: nothing worth saving; the next open rebuilds
            return
        live = list(self._slot.values())
        remap = np.full(len(self._ids), -1, dtype=np.int64)
        remap[np.array(sorted(live), dtype=np.int64)] = np.arange(len(live))
        parts = self._parts()
        layout = layout_of(self._delta)

        def renumbered(labels: np.ndarray) -> np.ndarray:  # removed documents and pads: -1
            return np.where(labels >= 0, remap[np.maximum(labels, 0)], -1)

        def entries(lst: int) -> tuple[np.ndarray, np.ndarray]:
            found = [list_entries(index, lst, layout) for index in parts]
            labels = renumbered(np.concatenate([f[0] for f in found]))
            keep = labels >= 0
            return labels[keep], np.concatenate([f[1] for f in found])[keep]

        nlist = self._delta.nlist
        sizes = np.array([sum(int((renumbered(list_labels(index, lst)) >= 0).sum()) for index in parts)
                          for lst in range(nlist)], dtype=np.int64)
        header = faiss.deserialize_index(self._trained)
        snap = new_snapshot(folder)
        ondisk = write_lists(snap / _LISTS, sizes, entries, layout, pad_codes(header))
        header.replace_invlists(ondisk, True)
        ondisk.this.disown()  # the header owns it now
        header.ntotal = int(sizes.sum())
        faiss.write_index(header, str(snap / _INDEX))
        del header, ondisk  # unmapped: the file is complete
        self._trained.tofile(snap / _TRAINED)
        meta = {"version": _VERSION, "dim": self.dim, "lists": str((snap / _LISTS).resolve()),
                "trained_on": self.trained_on}
        publish_snapshot(snap, [self._ids[s] for s in sorted(live)], meta, extras)
        self.load(folder)

    def load(self, folder: Path) -> dict[str, np.ndarray] | None:
        """Map the saved index (read-only; additions go to a fresh in-memory one); its extras, or None."""
        import faiss

        try:
            snap, meta, ids, extras = read_snapshot(folder)
            if meta.get("version") != _VERSION or meta.get("dim") != self.dim:
                return None
            trained = np.fromfile(snap / _TRAINED, dtype=np.uint8)
            flags = faiss.IO_FLAG_READ_ONLY
            if meta.get("lists") == str((snap / _LISTS).resolve()):
                base = faiss.read_index(str(snap / _INDEX), flags)
            else:  # the cache was moved: the lists file is found beside the header (faiss says so on stdout)
                with quiet_stdout():
                    base = faiss.read_index(str(snap / _INDEX), flags | faiss.IO_FLAG_ONDISK_SAME_DIR)
            delta = faiss.deserialize_index(trained)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, json.JSONDecodeError) as exc:
            logger.info("saved token index in %s not used (%s)", folder, exc)
            return None
        self._ids, self._slot, self._dead = ids, {d: i for i, d in enumerate(ids)}, set()
        self._base, self._delta, self._trained, self._pending = base, delta, trained, []
        self._frozen = []
        self._sizes = None
        self.changed = False
        self.trained_on = int(meta.get("trained_on", 0))  # not recorded: unknown, so rebuilt at the next save
        return extras


def _search_params(probes: int, slots: np.ndarray | None) -> Any:
    """faiss's search parameters: ``probes`` lists per query, only ``slots`` (None: every document)."""
    import faiss

    params = faiss.SearchParametersIVF(nprobe=probes)
    if slots is not None:
        params.sel = faiss.IDSelectorBatch(slots)
    return params


def _split_search(index: Any, q: np.ndarray, slots: np.ndarray | None, probes: int,
                  k: int) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`TokenIndex._search` for an odd number of tokens, as two half-searches per token.

    faiss scans one query token per thread, so 3 tokens on 2 threads left one thread idle a third of the time
    (and 1 token, all of it). Each token's lists are dealt alternately into two halves (rounded up to an even
    count), searched as ``2t`` queries, and each token's two results merged into its best ``k``: the vectors the
    whole search finds, to faiss's rounding (each search rounds its lookup tables, list offsets included, over the
    lists it probes: scores differ by about 1e-4, and ties at the k-th may fall either way).
    """
    import faiss

    t = len(q)
    coarse_sims, lists = index.quantizer.search(q, probes + probes % 2)
    assign = np.ascontiguousarray(np.concatenate([lists[:, 0::2], lists[:, 1::2]]), dtype=np.int64)
    coarse = np.ascontiguousarray(np.concatenate([coarse_sims[:, 0::2], coarse_sims[:, 1::2]]), dtype=np.float32)
    doubled = np.ascontiguousarray(np.concatenate([q, q]), dtype=np.float32)
    vals = np.empty((2 * t, k), dtype=np.float32)
    labels = np.empty((2 * t, k), dtype=np.int64)
    index.search_preassigned_c(2 * t, faiss.swig_ptr(doubled), k, faiss.swig_ptr(assign), faiss.swig_ptr(coarse),
                               faiss.swig_ptr(vals), faiss.swig_ptr(labels), False,
                               _search_params(assign.shape[1], slots))
    vals, labels = np.concatenate([vals[:t], vals[t:]], axis=1), np.concatenate([labels[:t], labels[t:]], axis=1)
    best = np.argpartition(-vals, k - 1, axis=1)[:, :k]
    return np.take_along_axis(vals, best, axis=1), np.take_along_axis(labels, best, axis=1)


def _pooled(vals: np.ndarray, labels: np.ndarray, n_slots: int, dead: set[int]) -> np.ndarray:
    """Per slot: sum over query tokens of its best retrieved similarity, else the token's worst retrieved one.

    ``vals``/``labels`` are ``[t, k]``; -inf for slots no token retrieved (or dead ones).
    """
    ok = labels >= 0
    if dead:
        ok &= ~np.isin(labels, np.fromiter(dead, dtype=np.int64))
    floor = np.where(ok, vals, np.inf).min(axis=1)
    floor[~np.isfinite(floor)] = 0.0
    best = np.repeat(floor[:, None], n_slots, axis=1).astype(np.float32)
    for t in range(len(vals)):
        np.maximum.at(best[t], labels[t][ok[t]], vals[t][ok[t]])
    seen = np.zeros(n_slots, dtype=bool)
    seen[labels[ok]] = True
    score = best.sum(axis=0)
    score[~seen] = -np.inf
    return score
