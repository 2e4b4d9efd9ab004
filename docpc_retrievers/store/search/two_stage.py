"""Two-stage search: first stages keep candidates, MaxSim over their int8 rows ranks them.

A query keeps ``CANDIDATE_TOKEN_BUDGET / n_tokens`` candidates, at least
``n_candidates`` and at most ``MAX_CANDIDATE_FACTOR`` x that (``MIXED_CANDIDATE_FACTOR`` for 8-16 tokens on a large
index): fewer tokens rank summaries less reliably and cost less per candidate. One whose summary estimates are flat
also keeps their near-ties (``NEAR_TIE_FACTOR``), unless the caller gave the count. Small indexes (``SMALL_INDEX_DOCS``)
have a larger budget and double the cap: their first stage leaves the time. Queries of
a few tokens take mostly the token-level stage's candidates (``SHORT_QUERY_FACTOR`` x ``n_candidates``, more lists
scanned per token the fewer the tokens, within a budget of distinct codes read: tokens.py) and the summaries' best
``SHORT_SUMMARY_FACTOR`` x ``n_candidates``, and queries of up to 16 tokens some of each. Near-identical query tokens (padding, query augmentation) are grouped
first (query_tokens.py): the count of candidates, the choice of stage and the stages themselves see one row per
group, the approximate pass each group once scaled by its size, the exact pass every token. The candidates are scored
approximately (the query rounded to int8 per token and multiplied with the
int8 rows natively, or in bfloat16 where that is faster, in blocks on a few threads: exact.py), the best
``SHORTLIST_EXACT`` again in float32: those exact scores are what a search
returns. A mixed query whose best came from deep in the summaries' ranking scores their next best too
(``FOLLOW_UP_DEPTH``). On the skewed benchmark at 10,000 documents, 20-30-token queries
about popular topics needed 768 candidates to hold 0.99 of the exact top 10
(256 held 0.96); the approximate pass makes that many affordable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from docpc_retrievers.blas_threads import single_blas_thread
from docpc_retrievers.store.search.base import CandidateIndex, VectorSource
from docpc_retrievers.store.search.exact import approximate_scores, exact_scores
from docpc_retrievers.store.search.query_tokens import DistinctTokens, distinct_tokens
from docpc_retrievers.store.search.tokens import TokenIndex

__all__ = ["CANDIDATE_TOKEN_BUDGET", "Hit", "TwoStageSearch", "check_queries"]

CANDIDATE_TOKEN_BUDGET = 24576
"""Query tokens x candidates scored exactly, when more than ``n_candidates`` (96 or more tokens keep 256). Was 16,384
until the first stage moved to int8 codes (summary_codes.py); the 10-20 ms that saved at 100,000 documents now pay
for more candidates: 26-token topic queries keep 945 instead of 630, and recall@10 on the benchmark's 100k topic
set went from 0.93 to 0.96 (p50 66-79 -> 78-83 ms; usual 62-71 -> 79-82, long 72-80 -> 83-85, all still 1.000)."""
TOKEN_STAGE_MAX_TOKENS = 7
"""Queries of at most this many tokens take the token-level stage's candidates (summaries rank them poorly)."""
MIXED_MAX_TOKENS = 16
"""Queries of more tokens than ``TOKEN_STAGE_MAX_TOKENS`` and at most this many take the token stage's best
``MIXED_TOKEN_CANDIDATES`` (``MIXED_PROBES`` lists per token) in place of as many of the summaries' candidates. On
the benchmark's 100k store, 8-12-token hard queries held 0.98 of the exact top 10 with 1,024 summary candidates and
1.000 with the token stage's 256 beside 768 (p50 77-79 -> 93 ms, two alternating pairs). Up to 32 tokens, topic
queries (20-30) took 118 ms p50 and held no more (0.95): their token search costs 25-30 ms (docs/store.md)."""
MIXED_TOKEN_CANDIDATES = 256
MIXED_CANDIDATE_FACTOR = 12
"""A query of more than ``TOKEN_STAGE_MAX_TOKENS`` and at most ``MIXED_MAX_TOKENS`` tokens on an index larger than
``SMALL_INDEX_DOCS`` keeps up to this many times ``n_candidates`` (``MAX_CANDIDATE_FACTOR`` for longer queries, and
for one whose near-identical tokens were grouped, which takes the groups' own candidates), so the budget decides: 8
tokens keep 3,072, 12 tokens 2,048, 16 tokens 1,536. Their misses were near-ties (each within 0.3% of the exact 10th
but for two), which only more exactly scored candidates keep. On the benchmark's 100k store, recall@10 from 4x to
12x: hard 0.978 -> 0.990, fresh 8-token copies 0.982 -> 0.998 and 0.968 -> 0.986, and sets drawn to check it:
13-16-token noisier copies 0.986 -> 0.992, 9-16 tokens from two documents 0.996 -> 1.000 (0.996 -> 0.998 on the
held-back generator's corpus); p50 51-77 -> 78-97 ms, p90 at most 102 (through ``chroma run``: 8-token sets 96-99 /
107). 10x kept 8-10 ms more margin and hard at 0.988. Grouped queries gained nothing from it (held-back pad 0.995
either way, 15-20 ms slower: docs/store.md)."""
MIXED_PROBES = 8
"""Lists scanned per token for a mixed query (16 held no more of hard's exact top 10 at 256 + 768)."""
MAX_CANDIDATE_FACTOR = 4
"""A query keeps at most this many times ``n_candidates`` (one of 8-16 tokens on a large index:
``MIXED_CANDIDATE_FACTOR``). At 100,000 documents the 16-centroid ranking's best 512
hold 0.87 of topic queries' exact top 10, its best 1,024 0.95; 4x (with the coarse shortlist at 8 per candidate,
so the first stage costs what 2x did) raised recall@10 from 0.90 to 0.95 (hard) and 0.87 to 0.92 (topic) on the
benchmark's 100k store, at p50 within the run-to-run noise except hard (about +30 ms)."""
SMALL_INDEX_DOCS = 32_768
"""Indexes of at most this many documents keep more candidates (``SMALL_INDEX_BUDGET``, and ``SMALL_INDEX_SCALE``
times the cap): their first stage costs 5-10 ms instead of 25-50 ms at 100k, and the time it leaves pays for the
candidates that 20-60-token queries about popular topics need (10k benchmark store: topic and long 0.983 -> 0.997,
hard 0.997 -> 1.000, at p50 45-85 ms)."""
SMALL_INDEX_BUDGET = 32768
"""``CANDIDATE_TOKEN_BUDGET`` of a small index."""
SMALL_INDEX_SCALE = 2
NEAR_TIE_FACTOR = 32
"""A query whose summary estimates are flat keeps up to this many times ``n_candidates``: every document within
``NEAR_TIE_MARGIN`` (centroids.py) of the ``top_k``-th estimate. On a 100k benchmark store built from empty (50
queries per set, alternating runs): topic recall@10 0.85 (off) -> 0.934 (8x) -> 0.974 (16x) -> 0.98 (24x) -> 0.988
(28x) -> 0.990 (32x), long 0.968 -> 0.998; p50 unchanged (the median topic query keeps 1,078 candidates, against
983), topic p90 with the approximate pass on two pinned threads 121-123 ms at 16x and 185-191 at 32x (185-211 over
earlier runs); the held-back cone
generator and 10k unchanged (docs/store.md, "Near-ties widen the candidates" and "The approximate pass on two
threads")."""
SHORT_QUERY_FACTOR = 4
"""Queries of at most ``TOKEN_STAGE_MAX_TOKENS`` tokens take this many times ``n_candidates`` from the token stage
(unless the caller gave the count), beside the summaries' best (``SHORT_SUMMARY_FACTOR``). With 128 probes and 4,096 vectors per
token, on the 100k benchmark store (50 short queries): 1,024 held 0.964 of the exact top 10, 2,048 0.986, 3,072 0.990
(docs/store.md); with ``SHORT_PROBE_BUDGET`` and ``SHORT_PER_TOKEN`` 1,536 (6x) held 0.996. With the summaries' 256,
short queries copied from a document's rows went from 0.874 to 0.996 and the topic-drawn ones from 0.986 to 0.996.
Since the token stage codes residuals (tokens.py, version 3), 1,024 (4x) hold 0.996 and 0.998 (6x: 0.998 both), at
p50 98-111 ms against 106-119 for 6x (alternating, one reader)."""
SHORT_PROBE_BUDGET = 768
"""Lists a short query scans in all: ``SHORT_PROBE_BUDGET // n_tokens`` per token, at most ``SHORT_MAX_PROBES`` (3
tokens 256, 5 tokens 153, 7 tokens 109): a few tokens each scan more lists for what one scan of 7 cost."""
SHORT_MAX_PROBES = 256
SHORT_DISTINCT_CODES: int | None = 6_000_000
"""Vectors a short query's tokens read together in the token stage, at most (``TokenIndex.probes_within``: fewer lists
per token where their lists together hold more; 64 bytes each, about 0.4 GB). On the benchmark's 100k store (38M
vectors in 2,048 lists) a short query's 768 lists hold 13-16M vectors, but tokens drawn around a topic share half
their lists, and tokens copied from a document's rows a quarter: those read half as much again, and their
summaries' candidates find what fewer lists miss. Alternating on one reader (p50 ms, recall@10), no cap / 9M /
8M / 7M: short 96-104 / 97-99 / 95-103 / 92-96 at 0.996 throughout; short_copy 107-114 / 101-103 / 94-101 / 90-91
at 0.998 / 0.998 / 0.996 / 0.992; the held-back corpus's short set (filler tokens in lists up to 12x the mean)
103-118 / 102-109 / 101-108 / 100 at 1.000, its p90 126-152 -> 110-119. 6M since 2026-11-26 (next session), with the
summaries' share doubled (``SHORT_SUMMARY_FACTOR``), which finds what the fewer lists miss: 8M + 256 / 6M + 512 /
7M + 512, alternating: short 95-100 / 88-91 / 94-95 ms at 0.996 throughout, short_copy 95-100 / 86-87 / 93-94 at
0.996 / 0.994 / 0.994, held-back short 102 / 93 at 1.000 (docs/store.md)."""
NO_TOKEN_STAGE_SHORT_FACTOR = 16
"""A short query with no token stage (being built in the background, or no faiss) takes this many times
``n_candidates`` from the summaries instead (unless the caller gave the count); during a build, from the documents
the part built so far does not hold, beside that part's share of ``SHORT_QUERY_FACTOR`` (token_build.py). 100k
benchmark store, the run's 20 short queries, share of the exact top 10 / p50 unloaded on the AVX2 machine: 1,024
candidates 0.545 / 187 ms, 2,048 0.570 / 220 ms, 4,096 0.710 / 264 ms, 8,192 0.885 / 398 ms; with the token stage
1.000 / 262 ms (docs/store.md)."""
SHORT_SUMMARY_FACTOR = 2
"""A short query takes the summaries' best this many times ``n_candidates`` beside the token stage's, ranked on all 16
centroids of every document up to ``centroids.FULL_SCAN_MAX`` (the coarse pass first above it). Share of the exact top
10 in the candidates at 6M codes (100k store, token stage's best 1,024 beside the summaries' 256 / 512 / 768 through
the coarse pass): short 0.996 throughout, short_copy 0.990 / 0.994 / 0.996, held-back short 1.000 throughout. Fresh
short sets drawn with unused seeds then showed the coarse pass losing queries that mix a few of a document's rows
with tokens about a popular topic (0.980 through it at 512, 0.996 on all 16 centroids), and at 512 the full scan,
after the token stage's, took no longer than the coarse pass and its 4,096-document shortlist (15.8 against 16.2
ms): since 2026-11-26 (next session) the full scan, at the same p50 (docs/store.md)."""
SHORT_PER_TOKEN = 12288
"""Nearest vectors a short query keeps per token (4,096 otherwise: tokens.PER_TOKEN). The scan costs the same; the
documents whose best vector for a token ranked past 4,096 now count it instead of a floor. At 100k, short queries in
the best 1,536 candidates: 0.984 with 4,096 per token, 0.996 with 16,384 (both with the probe budget). 12,288 (since
2026-11-26, evening) keeps every set's recall (short 0.996, short_copy 0.998, the held-back short set 1.000, padded
0.990, held-back pad 0.995) 2-7 ms sooner than 16,384 (faiss keeps fewer per token: short p50 101-106 -> 99-100,
short_copy 114-116 -> 110-112); 8,192 cost short 0.002 (0.994) for 2-3 ms more."""
HEAVY_GROUP_CANDIDATES = 512
"""A query longer than ``TOKEN_STAGE_MAX_TOKENS`` whose near-identical tokens were grouped (padding, query
augmentation: query_tokens.py) also takes the token stage's best this many for those groups' means alone
(``HEAVY_GROUP_PROBES`` lists each). MaxSim counts such a group once per copy, so the summaries' estimate of its
best match (a centroid's, not a row's) weighs as many times in their ranking; the token stage finds documents by
their best single row for it. On the benchmark's 100k store, padded queries' exact top 10 in the candidates went
from 0.978 to 0.988 (256) and 0.994 (512); searched, padded recall@10 0.978 -> 0.990 at p50 70-76 -> 84-94 ms
(alternating; usual and hard, which have no groups, unchanged). The held-back generator's pad set kept 0.995 at p50
66-81 -> 90-95 ms (docs/store.md)."""
HEAVY_GROUP_PROBES = 64
FOLLOW_UP_DEPTH = 0.5
"""A mixed query (``MIXED_MAX_TOKENS``, no groups) whose exact best ``top_k`` include one of the summaries'
candidates ranked past this share of their count (one the token stage did not find) scores the summaries' next
``FOLLOW_UP_FACTOR`` x that count too (at most ``FOLLOW_UP_MOST`` x ``n_candidates``): where the best reach that
deep, more lie past the cut. The misses of 8-16-token sets on the benchmark's 100k store were near-ties the
summaries ranked 2,412-20,084. The rule fires on 1-4 of 50 such queries per set; recall@10 c8 0.986 -> 0.992, hard
0.990 -> 1.000, m16 0.992 -> 0.998, at p50 within the noise (alternating; a query it fires on takes 125-165 ms), and
sets drawn afterwards to check it (fm_*) 0.996-1.000 -> 0.998-1.000 (docs/store.md)."""
FOLLOW_UP_FACTOR = 1.5
"""The follow-up's reserve, as a multiple of the summaries' count (2.5x in all; 2x held c8 at 0.990, 3x no more
than 2.5x: docs/store.md)."""
FOLLOW_UP_MOST = 16
"""The reserve's cap, in ``n_candidates`` (4,096 by default): what a query the rule fires on may add."""
SHORTLIST_EXACT = 64
"""Candidates the approximate pass keeps for exact float32 scoring (at least 4x top_k)."""
SCORE_CHUNK = 1024
"""Candidates scored per matrix product (bounds memory on exhaustive scans)."""
_RETRIES = 4

Hit = tuple[str, float, dict[str, Any], tuple[float, ...]]
"""A result: document id, exact score, public metadata, part scores."""


class _Candidates(NamedTuple):
    """A query's candidates, and what a follow-up round needs: the summaries' candidates ranked past
    ``FOLLOW_UP_DEPTH`` of them that the token stage did not find (``deep``), and the summaries' next best
    (``reserve``)."""

    ids: list[str]
    deep: frozenset[str] = frozenset()
    reserve: Sequence[str] = ()


def _short_top(tokens: TokenIndex, q: np.ndarray, count: int, allowed: set[str] | None) -> list[str]:
    """The token stage's best ``count`` for a short query ``q [t, dim]``: more lists per token the fewer the tokens
    (``SHORT_PROBE_BUDGET``), within ``SHORT_DISTINCT_CODES``."""
    probes = min(SHORT_MAX_PROBES, max(1, SHORT_PROBE_BUDGET // q.shape[0]))
    return tokens.top(q, count, allowed, probes=probes, per_token=SHORT_PER_TOKEN, distinct_codes=SHORT_DISTINCT_CODES)


def check_queries(queries: Sequence[np.ndarray], dim: int) -> list[np.ndarray]:
    """Queries as float32 ``[n_tokens, dim]`` matrices; ValueError for an empty or misshapen one."""
    qs = [np.asarray(q, dtype=np.float32) for q in queries]
    for q in qs:
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != dim:
            raise ValueError(f"query must be a non-empty [n_tokens, {dim}] matrix, got {q.shape}")
    return qs


class TwoStageSearch:
    """Candidates from ``first_stage``, exact scores from ``source``'s int8 rows."""

    def __init__(self, first_stage: CandidateIndex, source: VectorSource, n_candidates: int = 256, *,
                 token_stage: Callable[[], TokenIndex | None] | None = None) -> None:
        self.first_stage = first_stage
        self.source = source
        self.n_candidates = n_candidates
        self.token_stage = token_stage

    def candidates_for(self, query: np.ndarray, *, grouped: bool = False) -> int:
        """Candidates to score exactly for a query of ``query.shape[0]`` tokens (see the module docstring);
        ``grouped``: its near-identical tokens were grouped (it takes the groups' own candidates instead of the mixed
        cap: ``HEAVY_GROUP_CANDIDATES``)."""
        small = len(self.first_stage) <= SMALL_INDEX_DOCS
        mixed = not small and not grouped and TOKEN_STAGE_MAX_TOKENS < query.shape[0] <= MIXED_MAX_TOKENS
        factor = MIXED_CANDIDATE_FACTOR if mixed else MAX_CANDIDATE_FACTOR
        most = (SMALL_INDEX_SCALE if small else 1) * factor * self.n_candidates
        budget = SMALL_INDEX_BUDGET if small else CANDIDATE_TOKEN_BUDGET
        return int(min(most, max(self.n_candidates, budget // query.shape[0])))

    def search(
        self,
        query: np.ndarray,
        pool: Collection[str],
        allowed: set[str] | None,
        top_k: int,
        *,
        metadata: Callable[[list[str]], Mapping[str, dict[str, Any]]],
        n_candidates: int | None = None,
        exhaustive: bool = False,
        aggregate: str = "max",
    ) -> list[Hit]:
        """The ``top_k`` best of ``pool`` (``allowed``: the same ids as a set, None for every document). ``pool`` is
        listed only where it is small enough to score whole: a view of the store's ids saves listing 100k per search.

        A document deleted by another writer between the first stage and the record
        fetch is left out and its slot filled by the next candidate (``metadata``
        returns no entry for it): a reader never fails on a writer.
        """
        gone: set[str] = set()
        found: list[Hit] = []
        distinct = distinct_tokens(query)
        for _attempt in range(_RETRIES):
            live = pool if not gone else [i for i in pool if i not in gone]
            keep = allowed if not gone else set(live)
            n_cand = max(n_candidates or self.candidates_for(distinct.means, grouped=distinct.merged), top_k)
            with single_blas_thread():
                hits = self._ranked(query, live, keep, top_k, n_cand, exhaustive, aggregate,
                                    explicit=n_candidates is not None, distinct=distinct)
            records = metadata([d for d, _, _ in hits])
            missing = {d for d, _, _ in hits if d not in records}
            found = [(d, s, dict(records[d]), parts) for d, s, parts in hits if d in records]
            if len(found) >= min(top_k, len(live) - len(missing)) or not missing - gone:
                break
            gone |= missing
        return found[:top_k]

    def candidates(
        self, q: np.ndarray, n: int, allowed: set[str] | None, *, explicit: bool = False, top_k: int = 0,
        heavy: np.ndarray | None = None,
    ) -> list[str]:
        """The ids :meth:`planned` gives."""
        return self.planned(q, n, allowed, explicit=explicit, top_k=top_k, heavy=heavy).ids

    def planned(
        self, q: np.ndarray, n: int, allowed: set[str] | None, *, explicit: bool = False, top_k: int = 0,
        heavy: np.ndarray | None = None,
    ) -> _Candidates:
        """The first stage's ``n`` candidates; a short query takes the token-level stage's instead, beside the
        summaries' best ``SHORT_SUMMARY_FACTOR`` x ``n_candidates``, and a mixed one (``MIXED_MAX_TOKENS``) some of each (when there is a token
        stage). ``explicit``: ``n`` was asked for by the caller, so a short query takes ``n`` from the token stage
        (not ``SHORT_QUERY_FACTOR`` x ``n_candidates``) and the
        summaries are not widened. ``top_k``: widen the summaries' candidates to the near-ties of their
        ``top_k``-th best (``NEAR_TIE_FACTOR``; 0: never). ``heavy``: the means ``[g, dim]`` of the query's groups of
        near-identical tokens; a query longer than short adds the token stage's best ``HEAVY_GROUP_CANDIDATES`` for
        them (unless ``explicit``). A mixed query without groups, given ``top_k`` and not ``explicit``, also keeps
        the summaries' ranks and their next best for a follow-up round (``FOLLOW_UP_DEPTH``)."""
        def widest(count: int) -> int:  # near-ties within the rest of the cap
            return max(count, NEAR_TIE_FACTOR * self.n_candidates - (n - count))

        def summaries(count: int, skip: Collection[str] | None = None) -> list[str]:
            plain = explicit or top_k <= 0
            if skip is None:  # (a backend written before ``skip`` is asked as before)
                return self.first_stage.top(q, count, allowed) if plain else self.first_stage.top_widened(
                    q, count, allowed, rank=top_k, most=widest(count))
            return self.first_stage.top_widened(q, count, allowed, rank=0 if plain else top_k,
                                                most=count if plain else widest(count), skip=skip)

        short = q.shape[0] <= TOKEN_STAGE_MAX_TOKENS
        grouped = heavy is not None and len(heavy) > 0 and not short and not explicit
        wanted = q.shape[0] <= MIXED_MAX_TOKENS or grouped
        tokens = self.token_stage() if self.token_stage is not None and wanted else None
        partial = tokens is not None and tokens.coverage < 1  # a build under way: its part of the store so far
        if tokens is None or (short and partial):
            wide = short and not explicit  # the summaries rank a short query's best poorly: more of them
            skip = tokens.covered if tokens is not None else None  # a partial stage's own: the summaries rank the rest
            best = summaries(max(n, NO_TOKEN_STAGE_SHORT_FACTOR * self.n_candidates) if wide else n, skip)
            if tokens is None:
                return _Candidates(best)
            # The built part's best, as many as the whole token stage would keep from so large a share of the store.
            count = n if explicit else max(self.n_candidates,
                                           round(SHORT_QUERY_FACTOR * tokens.coverage * self.n_candidates))
            return _Candidates(list(dict.fromkeys([*_short_top(tokens, q, count, allowed), *best])))
        if short:
            # A short query: the token stage ranks queries about a topic well and summaries poorly; queries copied
            # from a document's rows the other way round (docs/store.md, "Short queries built another way").
            found = _short_top(tokens, q, n if explicit else max(n, SHORT_QUERY_FACTOR * self.n_candidates), allowed)
            best = self.first_stage.top(q, SHORT_SUMMARY_FACTOR * self.n_candidates, allowed)
            return _Candidates(list(dict.fromkeys([*found, *best])))
        found: list[str] = []
        if q.shape[0] <= MIXED_MAX_TOKENS:
            found = tokens.top(q, min(MIXED_TOKEN_CANDIDATES, n // 2), allowed, probes=MIXED_PROBES)
        by_group: list[str] = []
        if grouped:
            by_group = tokens.top(np.asarray(heavy, dtype=np.float32), HEAVY_GROUP_CANDIDATES, allowed,
                                  probes=HEAVY_GROUP_PROBES, per_token=SHORT_PER_TOKEN)
        count = n if partial else n - len(found)  # a partial token stage adds to the summaries, replaces none of them
        if grouped or explicit or top_k <= 0 or q.shape[0] > MIXED_MAX_TOKENS:
            return _Candidates(list(dict.fromkeys([*found, *summaries(count), *by_group])))
        reserve = min(int(FOLLOW_UP_FACTOR * count), FOLLOW_UP_MOST * self.n_candidates)
        best, more = self.first_stage.top_ranked(q, count, allowed, rank=top_k, most=widest(count), reserve=reserve)
        deep = frozenset(best[math.ceil(FOLLOW_UP_DEPTH * len(best)) :]).difference(found)
        return _Candidates(list(dict.fromkeys([*found, *best])), deep, more)

    def _ranked(
        self, q: np.ndarray, pool: Collection[str], allowed: set[str] | None, top_k: int, n_cand: int, exhaustive: bool,
        aggregate: str, *, distinct: DistinctTokens, explicit: bool = False,
    ) -> list[tuple[str, float, tuple[float, ...]]]:
        """First stage (unless exhaustive or the pool is small), then exact int8 MaxSim over the candidates.

        ``distinct``: the query's near-identical tokens grouped (query_tokens.py): the first stage sees each group
        once, the approximate pass once scaled by its size; the exact pass scores every token."""
        small = exhaustive or len(pool) <= n_cand
        plan = _Candidates(list(pool)) if small else self.planned(
            distinct.means, n_cand, allowed, explicit=explicit, top_k=top_k, heavy=distinct.repeated())
        best = self._scored(q, plan.ids, top_k, exhaustive, aggregate, distinct=distinct)
        if plan.reserve and any(d in plan.deep for _, d, _ in best):
            seen = set(plan.ids)  # the best reached deep into the summaries: score their next best too
            more = self._scored(q, [d for d in plan.reserve if d not in seen], top_k, False, aggregate,
                                distinct=distinct)
            best = sorted([*best, *more], key=lambda x: (-x[0], x[1]))[:top_k]
        return [(d, s, p) for s, d, p in best]

    def _scored(
        self, q: np.ndarray, cand: list[str], top_k: int, exhaustive: bool, aggregate: str, *,
        distinct: DistinctTokens,
    ) -> list[tuple[float, str, tuple[float, ...]]]:
        """The exact best ``top_k`` of ``cand`` as (score, id, part scores), best first; unless ``exhaustive``, an
        approximate pass first keeps the ``SHORTLIST_EXACT`` that the exact pass scores."""
        keep = max(SHORTLIST_EXACT, 4 * top_k)
        if not exhaustive and len(cand) > keep:  # an approximate pass picks the few the exact pass scores
            fast = approximate_scores(distinct.weighted(), cand, self.source, aggregate)
            cand = [cand[i] for i in np.argsort(-fast, kind="stable")[:keep] if fast[i] > -np.inf]
        best: list[tuple[float, str, tuple[float, ...]]] = []
        for start in range(0, len(cand), SCORE_CHUNK):
            chunk = cand[start : start + SCORE_CHUNK]
            scores, per_part = exact_scores(q, chunk, self.source, aggregate)
            best.extend(  # -inf: deleted meanwhile
                (float(s), d, tuple(float(v) for v in p)) for s, d, p in zip(scores.tolist(), chunk, per_part) if s > -np.inf
            )
            best = sorted(best, key=lambda x: (-x[0], x[1]))[:top_k]
        return best
