"""A second synthetic generator, built unlike store_bench's, to check a first stage tuned on the first one.

Written on 2026-11-24 before any benchmark run on it (only a check of query
shapes and score spread on 300 documents came first), and not tuned
afterwards: its parameters are the ones below whatever the store scores on them. What differs
from ``SyntheticCorpus`` (both are stand-ins for ColQwen embeddings):

* **A cone.** Every vector shares a common direction, as real late-interaction
  embeddings do (their pairwise cosines are mostly positive), so scores are
  compressed and near-ties are the rule, not the exception.
* **Hierarchical topics.** 60 themes with a Zipf popularity, 8 sub-topics each;
  documents mix 1-4 themes and 1-3 sub-topics per theme with peaky weights,
  and each document has its own noise level.
* **Filler tokens.** 15% of a document's vectors sit near the common direction
  (margins, background, layout tokens), close to every query's filler tokens.
* **Queries copied from nothing**, in three shapes: ``para`` (10-20 tokens
  about one of a target document's sub-topics, shifted the query's own way,
  30% filler), ``broad`` (15-25 tokens about two themes' centres, matching
  no sub-topic exactly) and ``pad`` (8-14 content tokens plus 10 near-identical
  augmentation tokens, as ColQwen appends to every query), and ``filter2``:
  ``para`` queries under a metadata filter keeping about 2% of the corpus.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CONE_FILTERS", "ConeCorpus"]

#: Metadata filters of the filtered sets (``bucket`` is uniform in 0..999 per document).
CONE_FILTERS = {"filter2": {"bucket": {"$lt": 20}}}


class ConeCorpus:
    """Cone-shaped, hierarchical, filler-heavy unit vectors with the interface of ``SyntheticCorpus``."""

    def __init__(self, dim: int = 128, seed: int = 0, n_themes: int = 60, subs_per_theme: int = 8) -> None:
        self.dim = dim
        self.rng = np.random.default_rng(10_000 + seed)
        self.common = self._unit(self.rng.standard_normal(dim))
        self.pad = self._unit(self.common + 0.8 * self._unit(self.rng.standard_normal(dim)))
        self.themes = self._unit(self.rng.standard_normal((n_themes, dim)))
        self.subs = self._unit(self.themes[:, None, :] + 0.7 * self._unit(
            self.rng.standard_normal((n_themes, subs_per_theme, dim))))
        weights = 1.0 / np.arange(1, n_themes + 1) ** 1.0
        self.popularity = weights / weights.sum()

    @staticmethod
    def _unit(x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    def _noise(self, n: int) -> np.ndarray:
        return self._unit(self.rng.standard_normal((n, self.dim)))

    def document(self, n_vectors: int = 760) -> np.ndarray:
        n_themes = int(min(4, 1 + self.rng.poisson(1.0)))
        themes = self.rng.choice(len(self.themes), size=n_themes, replace=False, p=self.popularity)
        subs = np.array([(t, s) for t in themes
                         for s in self.rng.choice(self.subs.shape[1], size=int(self.rng.integers(1, 4)), replace=False)])
        weights = self.rng.dirichlet(np.full(len(subs), 0.5))
        n_filler = int(round(0.15 * n_vectors))
        picks = subs[self.rng.choice(len(subs), size=n_vectors - n_filler, p=weights)]
        level = float(self.rng.uniform(0.5, 1.1))
        content = 0.5 * self.common + self.subs[picks[:, 0], picks[:, 1]] + level * self._noise(len(picks))
        filler = self.common + 0.5 * self._noise(n_filler)
        return self._unit(np.concatenate([content, filler]))[self.rng.permutation(n_vectors)]

    def _content_tokens(self, centre: np.ndarray, n: int) -> np.ndarray:
        shift = 0.4 * self._unit(self.rng.standard_normal(self.dim))
        return self._unit(0.5 * self.common + centre + shift + 0.8 * self._noise(n))

    def para(self, subs: np.ndarray, weights: np.ndarray) -> np.ndarray:
        t, s = subs[self.rng.choice(len(subs), p=weights)]
        n = int(self.rng.integers(10, 21))
        n_filler = int(round(0.3 * n))
        filler = self._unit(self.common + 0.6 * self._noise(n_filler))
        return np.concatenate([self._content_tokens(self.subs[t, s], n - n_filler), filler])

    def broad(self) -> np.ndarray:
        themes = self.rng.choice(len(self.themes), size=2, replace=False, p=self.popularity)
        n = int(self.rng.integers(15, 26))
        return np.concatenate([self._content_tokens(self.themes[t], k) for t, k in zip(themes, (n // 2, n - n // 2))])

    def padded(self, subs: np.ndarray, weights: np.ndarray) -> np.ndarray:
        t, s = subs[self.rng.choice(len(subs), p=weights)]
        content = self._content_tokens(self.subs[t, s], int(self.rng.integers(8, 15)))
        pads = self._unit(self.pad + 0.05 * self._noise(10))
        return np.concatenate([content, pads])

    def query_sets(self, targets: list[np.ndarray]) -> dict[str, list[np.ndarray]]:
        """Every set, one query per target: the targets' sub-topics (not their rows) seed ``para`` and ``pad``."""
        mixes = [self._mix_of(t) for t in targets]
        return {
            "para": [self.para(*m) for m in mixes],
            "broad": [self.broad() for _ in targets],
            "pad": [self.padded(*m) for m in mixes],
            "filter2": [self.para(*m) for m in mixes],
        }

    def _mix_of(self, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sub-topics a generated document was drawn from (looked up by its vectors' closest sub-topics)."""
        flat = self.subs.reshape(-1, self.dim)
        nearest = np.argmax(target @ flat.T, axis=1)
        counts = np.bincount(nearest, minlength=len(flat)).astype(np.float64)
        top = np.flatnonzero(counts >= max(2.0, 0.05 * counts.sum()))
        if top.size == 0:
            top = np.array([int(np.argmax(counts))])
        subs = np.stack([top // self.subs.shape[1], top % self.subs.shape[1]], axis=1)
        return subs, counts[top] / counts[top].sum()
