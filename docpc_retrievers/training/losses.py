"""Differentiable late-interaction scores and the training losses of ``docpc train``.

Why this module exists: document-level retrieval has several relevant documents per
query. Standard in-batch InfoNCE (colpali-engine's ``ColbertLoss``) treats every other
document of the batch as a negative, including the query's other relevant documents.
This module provides

- :func:`maxsim_scores`: the MaxSim matrix ``S[q, d] = sum_i max_j <q_i, d_j>`` between
  padded query and document token embeddings, differentiable, with document padding masked
  with ``-inf`` before the max (never 0: with 0, padding wins whenever all real
  similarities are negative) and query padding left out of the sum;
- :func:`multi_positive_infonce`: InfoNCE whose numerator sums over *all* positives of a
  query (positives come from a label mask, not from batch position);
- :func:`infonce`: the standard single-positive baseline (one target column per query);
- :func:`approx_ndcg` / :func:`approx_ndcg_loss`: ``1 - ApproxNDCG@K`` (Qin, Liu & Li,
  2010): ranks approximated with sigmoids of score differences, graded gains, truncated at K;
- :class:`CombinedLoss`: ``L = L_mp + lambda * L_topk`` with the listwise term added only at
  optimisation steps ``m, 2m, ...``, plus the ablation variants. Its step counter is part of
  its state (:meth:`CombinedLoss.state_dict`), so a resumed run keeps the schedule.

Shapes: ``nq`` queries, ``nd`` documents, ``Lq``/``Ld`` padded token counts, ``dim``
embedding size. All losses take the score matrix ``S`` of shape ``[nq, nd]``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

__all__ = [
    "DEFAULT_LISTWISE_ALPHA",
    "DEFAULT_LISTWISE_EVERY",
    "DEFAULT_LISTWISE_K",
    "DEFAULT_TEMPERATURE",
    "GAINS",
    "IGNORE_TARGET",
    "LOSS_VARIANTS",
    "TRUNCATION_RATIO",
    "CombinedLoss",
    "LossOutput",
    "approx_ndcg",
    "approx_ndcg_loss",
    "exact_ndcg",
    "infonce",
    "maxsim_scores",
    "multi_positive_infonce",
]

logger = logging.getLogger(__name__)

#: Loss variants accepted by :class:`CombinedLoss` (and ``docpc train --loss``).
LOSS_VARIANTS: tuple[str, ...] = ("combined", "mp-infonce", "infonce", "listwise")
#: Gain functions of the (Approx)NDCG: ``linear`` (gain = label, as trec_eval) or ``exponential`` (2^label - 1).
GAINS: tuple[str, ...] = ("linear", "exponential")
#: InfoNCE temperature tau (colpali-engine's ColbertLoss default, on query-length-normalised scores).
DEFAULT_TEMPERATURE = 0.02
#: The listwise term is added at optimisation steps m, 2m, ... (m = this).
DEFAULT_LISTWISE_EVERY = 40
#: Truncation K of ApproxNDCG@K.
DEFAULT_LISTWISE_K = 5
#: Sigmoid temperature alpha of the rank approximation (in score units, like tau; scores normalised by
#: query length differ by about 0.01 to 0.3 between documents).
DEFAULT_LISTWISE_ALPHA = 0.1
#: Default truncation temperature = this times alpha (in rank units), so both shrink together as alpha -> 0.
TRUNCATION_RATIO = 10.0
#: Target index meaning "no target for this query" in :func:`infonce`.
IGNORE_TARGET = -100


# --------------------------------------------------------------------------- MaxSim


def _as_bool_mask(mask: torch.Tensor | None, shape: tuple[int, int], device: torch.device, name: str) -> torch.Tensor:
    """A bool ``[n, L]`` mask (all True when None), checked against the embeddings' shape."""
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {shape}")
    return mask.to(device=device, dtype=torch.bool) if mask.dtype != torch.bool else mask.to(device)


def maxsim_scores(
    query_embeddings: torch.Tensor,
    doc_embeddings: torch.Tensor,
    query_mask: torch.Tensor | None = None,
    doc_mask: torch.Tensor | None = None,
    *,
    normalize: bool = False,
    doc_chunk_size: int | None = None,
) -> torch.Tensor:
    """Differentiable MaxSim matrix ``S[q, d] = sum_{i valid} max_{j valid} <q_i, d_j>``.

    ``query_embeddings``: ``[nq, Lq, dim]``; ``doc_embeddings``: ``[nd, Ld, dim]``;
    ``query_mask``: ``[nq, Lq]`` and ``doc_mask``: ``[nd, Ld]``, True (or 1) for real tokens
    (e.g. the processors' ``attention_mask``); None means no padding.
    Document padding is set to ``-inf`` before the max, so it can never be the maximum; query
    padding is excluded from the sum. Padded rows are zeroed with ``torch.where`` first, so
    non-finite values in padding (sdpa can produce NaN rows for left padding) do not leak into
    the scores. ``normalize=True`` divides each row by the query's number of real tokens
    (scores then lie in [-1, 1] for unit vectors, as colpali-engine's ``normalize_scores``).
    ``doc_chunk_size`` bounds the ``[nq, chunk, Lq, Ld]`` similarity tensor's memory.
    Returns ``[nq, nd]`` in the embeddings' dtype. Raises ``ValueError`` for a document
    without any real token (its score would be ``-inf``).
    """
    if query_embeddings.dim() != 3 or doc_embeddings.dim() != 3:
        raise ValueError(
            f"expected [n, L, dim] embeddings, got query {tuple(query_embeddings.shape)} "
            f"and doc {tuple(doc_embeddings.shape)}"
        )
    if query_embeddings.shape[-1] != doc_embeddings.shape[-1]:
        raise ValueError(
            f"embedding dims differ: query {query_embeddings.shape[-1]} vs doc {doc_embeddings.shape[-1]}"
        )
    nq, lq, _ = query_embeddings.shape
    nd, ld, _ = doc_embeddings.shape
    device = query_embeddings.device
    qmask = _as_bool_mask(query_mask, (nq, lq), device, "query_mask")
    dmask = _as_bool_mask(doc_mask, (nd, ld), doc_embeddings.device, "doc_mask").to(device)
    if nd and not bool(dmask.any(dim=1).all()):
        empty = torch.nonzero(~dmask.any(dim=1)).flatten().tolist()
        raise ValueError(f"documents {empty} have no unmasked token; MaxSim is undefined for them")
    zero = query_embeddings.new_zeros(())
    q = torch.where(qmask.unsqueeze(-1), query_embeddings, zero)
    d = torch.where(dmask.unsqueeze(-1), doc_embeddings.to(device), zero)
    chunk = nd if not doc_chunk_size else max(1, int(doc_chunk_size))
    neg_inf = torch.tensor(float("-inf"), dtype=q.dtype, device=device)
    parts: list[torch.Tensor] = []
    for start in range(0, nd, chunk):
        dc, mc = d[start : start + chunk], dmask[start : start + chunk]
        sim = torch.einsum("qid,pjd->qpij", q, dc)  # [nq, chunk, Lq, Ld]
        sim = torch.where(mc[None, :, None, :], sim, neg_inf)
        best = sim.amax(dim=-1)  # [nq, chunk, Lq]; finite: each document has a real token
        best = torch.where(qmask[:, None, :], best, zero)
        parts.append(best.sum(dim=-1))  # [nq, chunk]
    scores = torch.cat(parts, dim=1) if parts else q.new_zeros((nq, 0))
    if normalize:
        scores = scores / qmask.sum(dim=1, keepdim=True).clamp(min=1).to(scores.dtype)
    return scores


# --------------------------------------------------------------------------- contrastive losses


def _check_scores(scores: torch.Tensor, other: torch.Tensor, name: str) -> None:
    if scores.dim() != 2:
        raise ValueError(f"scores must be [nq, nd], got shape {tuple(scores.shape)}")
    if tuple(other.shape) != tuple(scores.shape):
        raise ValueError(f"{name} has shape {tuple(other.shape)}, expected {tuple(scores.shape)} like scores")


def _check_temperature(value: float, name: str) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value}")
    return value


def _zero_like_graph(scores: torch.Tensor) -> torch.Tensor:
    """A 0 that is still connected to the graph (so ``backward`` works on a batch without positives)."""
    return scores.sum() * 0.0


def multi_positive_infonce(
    scores: torch.Tensor, relevance: torch.Tensor, *, temperature: float = DEFAULT_TEMPERATURE
) -> torch.Tensor:
    """Multi-positive InfoNCE, averaged over the queries that have at least one positive in the batch.

    ``scores``: ``[nq, nd]`` MaxSim scores ``S``; ``relevance``: ``[nq, nd]`` labels (bool or
    graded numbers; ``> 0`` is a positive, everything else a negative). For query q with
    positives P and negatives N::

        L_q = -log( sum_{i in P} exp(S[q,i]/tau) / (sum_{i in P} exp(S[q,i]/tau) + sum_{j in N} exp(S[q,j]/tau)) )

    computed stably as ``logsumexp_all - logsumexp_P``. Positives come from the labels, so a
    document relevant to two queries of the batch counts as a positive for both. Returns a
    scalar; exactly 0 (still attached to the graph) when no query has a positive.
    """
    _check_scores(scores, relevance, "relevance")
    tau = _check_temperature(temperature, "temperature")
    positive = relevance > 0
    has_positive = positive.any(dim=1)
    if not bool(has_positive.any()):
        return _zero_like_graph(scores)
    logits = scores / tau
    neg_inf = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
    log_all = torch.logsumexp(logits, dim=1)  # [nq]
    log_pos = torch.logsumexp(torch.where(positive, logits, neg_inf), dim=1)  # [nq]; -inf without positives
    per_query = log_all[has_positive] - log_pos[has_positive]
    return per_query.mean()


def infonce(
    scores: torch.Tensor, targets: torch.Tensor, *, temperature: float = DEFAULT_TEMPERATURE
) -> torch.Tensor:
    """Standard single-positive InfoNCE: cross-entropy of ``S[q, :] / tau`` against one target column.

    ``scores``: ``[nq, nd]``; ``targets``: ``[nq]`` int64 column of each query's one positive,
    or :data:`IGNORE_TARGET` to leave a query out. Every other document of the batch, including
    the query's other relevant documents, is a negative: this is the baseline the multi-positive
    loss is compared with. Mean over the queries with a target; 0 (attached) when none has one.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be [nq, nd], got shape {tuple(scores.shape)}")
    if targets.shape != (scores.shape[0],):
        raise ValueError(f"targets must have shape [{scores.shape[0]}], got {tuple(targets.shape)}")
    tau = _check_temperature(temperature, "temperature")
    targets = targets.to(device=scores.device, dtype=torch.long)
    valid = targets != IGNORE_TARGET
    if not bool(valid.any()):
        return _zero_like_graph(scores)
    if bool(((targets[valid] < 0) | (targets[valid] >= scores.shape[1])).any()):
        raise ValueError(f"targets must lie in [0, {scores.shape[1]}) or be {IGNORE_TARGET}")
    return F.cross_entropy(scores / tau, targets, ignore_index=IGNORE_TARGET)


# --------------------------------------------------------------------------- (Approx)NDCG


def _gains(relevance: torch.Tensor, gain: str, dtype: torch.dtype) -> torch.Tensor:
    """Gain of each label: the label itself (linear) or ``2^label - 1``; non-positive labels give 0."""
    if gain not in GAINS:
        raise ValueError(f"unknown gain {gain!r}; choose one of {', '.join(GAINS)}")
    rel = relevance.to(dtype).clamp(min=0)
    return rel if gain == "linear" else torch.exp2(rel) - 1.0


def _ideal_dcg(gains: torch.Tensor, k: int) -> torch.Tensor:
    """Ideal DCG@k per query (gains sorted descending), ``[nq]``."""
    top = torch.sort(gains, dim=1, descending=True).values[:, :k]
    ranks = torch.arange(1, top.shape[1] + 1, dtype=gains.dtype, device=gains.device)
    return (top / torch.log2(ranks + 1.0)).sum(dim=1)


def _check_k(k: int) -> int:
    if isinstance(k, bool) or int(k) != k or int(k) < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def approx_ndcg(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    *,
    k: int = DEFAULT_LISTWISE_K,
    alpha: float = DEFAULT_LISTWISE_ALPHA,
    truncation_temperature: float | None = None,
    gain: str = "linear",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth ApproxNDCG@K per query (Qin, Liu & Li, 2010); returns ``(values [nq], valid [nq])``.

    The rank of document x for query q is approximated by
    ``rank(x) = 1 + sum_{y != x} sigmoid((S[q,y] - S[q,x]) / alpha)``; the truncation
    ``1[rank(x) <= K]`` by ``sigmoid((K + 0.5 - rank(x)) / beta)`` with
    ``beta = truncation_temperature`` in rank units (default: :data:`TRUNCATION_RATIO` * alpha,
    soft enough that a relevant document just below K still gets a gradient). Then
    ``ApproxDCG@K = sum_x gain(x) * trunc(x) / log2(1 + rank(x))`` divided by the exact ideal
    DCG@K of the batch's labels. As alpha (and beta) -> 0 this tends to the exact NDCG@K on
    distinct scores. ``valid`` is False for queries without a positive label (ideal DCG 0);
    their value is 0. ``gain``: ``linear`` (label) or ``exponential`` (``2^label - 1``).
    """
    _check_scores(scores, relevance, "relevance")
    k = _check_k(k)
    alpha = _check_temperature(alpha, "alpha")
    beta = (
        TRUNCATION_RATIO * alpha
        if truncation_temperature is None
        else _check_temperature(truncation_temperature, "truncation_temperature")
    )
    gains = _gains(relevance.to(scores.device), gain, scores.dtype)  # [nq, nd]
    nd = scores.shape[1]
    # diff[q, x, y] = S[q, y] - S[q, x]: how much y outscores x.
    diff = scores.unsqueeze(1) - scores.unsqueeze(2)
    off_diagonal = ~torch.eye(nd, dtype=torch.bool, device=scores.device)
    beats = torch.sigmoid(diff / alpha) * off_diagonal  # [nq, nd, nd]
    ranks = 1.0 + beats.sum(dim=2)  # [nq, nd]
    truncation = torch.sigmoid((k + 0.5 - ranks) / beta)
    dcg = (gains * truncation / torch.log2(1.0 + ranks)).sum(dim=1)  # [nq]
    ideal = _ideal_dcg(gains, k)
    valid = ideal > 0
    values = torch.where(valid, dcg / torch.where(valid, ideal, torch.ones_like(ideal)), torch.zeros_like(dcg))
    return values, valid


def approx_ndcg_loss(scores: torch.Tensor, relevance: torch.Tensor, **options: Any) -> torch.Tensor:
    """``1 - ApproxNDCG@K`` averaged over queries with at least one positive; 0 (attached) if none has one.

    Shapes and keyword options (``k``, ``alpha``, ``truncation_temperature``, ``gain``) as :func:`approx_ndcg`.
    """
    values, valid = approx_ndcg(scores, relevance, **options)
    if not bool(valid.any()):
        return _zero_like_graph(scores)
    return 1.0 - values[valid].mean()


def exact_ndcg(
    scores: torch.Tensor, relevance: torch.Tensor, *, k: int = DEFAULT_LISTWISE_K, gain: str = "linear"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact NDCG@K per query from a score matrix (not differentiable); ``(values [nq], valid [nq])``.

    Documents are ranked by score, descending; ties keep column order (stable sort). Gains and
    the discount ``1/log2(1 + rank)`` as :func:`approx_ndcg`. Used by tests and for monitoring.
    """
    _check_scores(scores, relevance, "relevance")
    k = _check_k(k)
    with torch.no_grad():
        gains = _gains(relevance.to(scores.device), gain, scores.dtype)
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
        top = torch.gather(gains, 1, order)
        ranks = torch.arange(1, top.shape[1] + 1, dtype=scores.dtype, device=scores.device)
        dcg = (top / torch.log2(ranks + 1.0)).sum(dim=1)
        ideal = _ideal_dcg(gains, k)
        valid = ideal > 0
        values = torch.where(valid, dcg / torch.where(valid, ideal, torch.ones_like(ideal)), torch.zeros_like(dcg))
    return values, valid


# --------------------------------------------------------------------------- combined loss and schedule


@dataclass(frozen=True)
class LossOutput:
    """Result of one :class:`CombinedLoss` call.

    ``total``: the scalar to back-propagate. ``contrastive``: the (multi- or single-positive)
    InfoNCE term, ``listwise``: ``1 - ApproxNDCG@K``; a term that is not part of ``total`` at this
    step is still computed, without gradient, for logging. ``listwise_applied``: whether the
    listwise term is in ``total``. ``step``: the 1-based optimisation step this loss belongs to.
    """

    total: torch.Tensor
    contrastive: torch.Tensor
    listwise: torch.Tensor
    listwise_applied: bool
    contrastive_applied: bool
    step: int


class CombinedLoss:
    """``L = L_mp + lambda * L_topk`` with the listwise term only at optimisation steps m, 2m, ...

    ``variant``: ``combined`` (the method), ``mp-infonce`` (multi-positive InfoNCE only),
    ``infonce`` (standard single-positive InfoNCE only, the baseline) or ``listwise``
    (``1 - ApproxNDCG@K`` only, at every step). ``temperature``: tau of the InfoNCE terms.
    ``listwise_every``: m (1 = every step). ``listwise_weight``: lambda. ``listwise_k``,
    ``listwise_alpha``, ``truncation_temperature``, ``gain``: see :func:`approx_ndcg`.

    The object counts completed optimisation steps (:attr:`completed_steps`); the trainer
    calls :meth:`advance` after each optimiser step, so every micro-batch of a gradient
    accumulation group sees the same schedule decision. :meth:`state_dict` /
    :meth:`load_state_dict` carry the counter across a resume.
    """

    def __init__(
        self,
        variant: str = "combined",
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        listwise_every: int = DEFAULT_LISTWISE_EVERY,
        listwise_weight: float = 1.0,
        listwise_k: int = DEFAULT_LISTWISE_K,
        listwise_alpha: float = DEFAULT_LISTWISE_ALPHA,
        truncation_temperature: float | None = None,
        gain: str = "linear",
    ) -> None:
        if variant not in LOSS_VARIANTS:
            raise ValueError(f"unknown loss variant {variant!r}; choose one of {', '.join(LOSS_VARIANTS)}")
        if isinstance(listwise_every, bool) or int(listwise_every) != listwise_every or listwise_every < 1:
            raise ValueError(f"listwise_every must be an integer >= 1, got {listwise_every!r}")
        weight = float(listwise_weight)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"listwise_weight (lambda) must be a finite number >= 0, got {listwise_weight!r}")
        if gain not in GAINS:
            raise ValueError(f"unknown gain {gain!r}; choose one of {', '.join(GAINS)}")
        self.variant = variant
        self.temperature = _check_temperature(temperature, "temperature")
        self.listwise_every = int(listwise_every)
        self.listwise_weight = weight
        self.listwise_k = _check_k(listwise_k)
        self.listwise_alpha = _check_temperature(listwise_alpha, "listwise_alpha")
        self.truncation_temperature = (
            None if truncation_temperature is None else _check_temperature(truncation_temperature, "truncation_temperature")
        )
        self.gain = gain
        self.completed_steps = 0

    # ------------------------------------------------------------- schedule

    @property
    def current_step(self) -> int:
        """1-based index of the optimisation step now being computed."""
        return self.completed_steps + 1

    def listwise_active(self, step: int | None = None) -> bool:
        """Whether the listwise term is in the loss at 1-based ``step`` (default: the current step)."""
        step = self.current_step if step is None else int(step)
        if self.variant == "listwise":
            return True
        if self.variant != "combined":
            return False
        return step % self.listwise_every == 0

    def advance(self, steps: int = 1) -> None:
        """Record ``steps`` completed optimisation steps (call once per optimiser step)."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        self.completed_steps += int(steps)

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: the step counter plus the settings it was used with."""
        return {
            "completed_steps": self.completed_steps,
            "variant": self.variant,
            "listwise_every": self.listwise_every,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step counter saved by :meth:`state_dict` (settings may differ; a change is logged)."""
        steps = int(state["completed_steps"])
        if steps < 0:
            raise ValueError(f"completed_steps must be >= 0, got {steps}")
        for key in ("variant", "listwise_every"):
            if key in state and state[key] != getattr(self, key):
                logger.warning("resumed loss state had %s=%r, now %r", key, state[key], getattr(self, key))
        self.completed_steps = steps

    # ------------------------------------------------------------- loss

    def __call__(
        self, scores: torch.Tensor, relevance: torch.Tensor, targets: torch.Tensor | None = None
    ) -> LossOutput:
        """Loss for one (micro-)batch at the current step.

        ``scores``: ``[nq, nd]`` MaxSim scores; ``relevance``: ``[nq, nd]`` graded labels
        (``> 0`` = positive); ``targets``: ``[nq]`` column of each query's paired positive,
        required by the ``infonce`` variant only.
        """
        _check_scores(scores, relevance, "relevance")
        step = self.current_step
        use_listwise = self.listwise_active(step)
        use_contrastive = self.variant != "listwise"
        if self.variant == "infonce" and targets is None:
            raise ValueError("the 'infonce' variant needs targets (each query's paired positive column)")

        def contrastive() -> torch.Tensor:
            if self.variant == "infonce":
                assert targets is not None
                return infonce(scores, targets, temperature=self.temperature)
            return multi_positive_infonce(scores, relevance, temperature=self.temperature)

        def listwise() -> torch.Tensor:
            return approx_ndcg_loss(
                scores,
                relevance,
                k=self.listwise_k,
                alpha=self.listwise_alpha,
                truncation_temperature=self.truncation_temperature,
                gain=self.gain,
            )

        if use_contrastive:
            contrastive_term = contrastive()
        else:
            with torch.no_grad():
                contrastive_term = contrastive()
        if use_listwise:
            listwise_term = listwise()
        else:
            with torch.no_grad():
                listwise_term = listwise()

        if self.variant == "listwise":
            total = listwise_term
        elif use_listwise:
            total = contrastive_term + self.listwise_weight * listwise_term
        else:
            total = contrastive_term
        return LossOutput(
            total=total,
            contrastive=contrastive_term,
            listwise=listwise_term,
            listwise_applied=use_listwise,
            contrastive_applied=use_contrastive,
            step=step,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(variant={self.variant!r}, temperature={self.temperature}, "
            f"listwise_every={self.listwise_every}, listwise_weight={self.listwise_weight}, "
            f"listwise_k={self.listwise_k}, listwise_alpha={self.listwise_alpha}, step={self.current_step})"
        )
