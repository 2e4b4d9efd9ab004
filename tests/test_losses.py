"""Tests of the training losses: padded MaxSim, (multi-positive) InfoNCE, ApproxNDCG, the listwise schedule."""

from __future__ import annotations

import json
import math

import pytest
import torch

from docpc_retrievers.training.losses import (
    IGNORE_TARGET,
    CombinedLoss,
    approx_ndcg,
    approx_ndcg_loss,
    exact_ndcg,
    infonce,
    maxsim_scores,
    multi_positive_infonce,
)


def _ref_maxsim(query: torch.Tensor, doc: torch.Tensor) -> float:
    """Unpadded reference: sum over query tokens of the max dot product over document tokens."""
    return float((query @ doc.T).max(dim=1).values.sum())


def _padded(items: list[torch.Tensor], dim: int, fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(t.shape[0] for t in items)
    out = torch.full((len(items), length, dim), fill, dtype=items[0].dtype)
    mask = torch.zeros((len(items), length), dtype=torch.bool)
    for i, t in enumerate(items):
        out[i, : t.shape[0]] = t
        mask[i, : t.shape[0]] = True
    return out, mask


# --------------------------------------------------------------------------- MaxSim


def test_maxsim_matches_unpadded_reference() -> None:
    g = torch.Generator().manual_seed(0)
    queries = [torch.randn(n, 8, generator=g, dtype=torch.float64) for n in (3, 5, 1)]
    docs = [torch.randn(n, 8, generator=g, dtype=torch.float64) for n in (4, 9, 2, 7)]
    q, qm = _padded(queries, 8, fill=7.0)  # garbage in padding must not matter
    d, dm = _padded(docs, 8, fill=7.0)
    scores = maxsim_scores(q, d, qm, dm)
    assert scores.shape == (3, 4)
    for i, qi in enumerate(queries):
        for j, dj in enumerate(docs):
            assert scores[i, j].item() == pytest.approx(_ref_maxsim(qi, dj), abs=1e-12)
    chunked = maxsim_scores(q, d, qm, dm, doc_chunk_size=3)
    assert torch.allclose(chunked, scores)
    normalised = maxsim_scores(q, d, qm, dm, normalize=True)
    assert torch.allclose(normalised, scores / torch.tensor([[3.0], [5.0], [1.0]], dtype=torch.float64))


def test_maxsim_padding_never_wins() -> None:
    # Every real similarity is negative: masking padding with 0 would return 0 here.
    query = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    doc = torch.tensor([[[-1.0, -0.5], [-0.25, -2.0], [0.0, 0.0]]])  # last row is padding
    mask = torch.tensor([[True, True, False]])
    score = maxsim_scores(query, doc, None, mask)
    assert score.item() == pytest.approx(-0.25 + -0.5)
    assert score.item() < 0
    # Non-finite values in padded rows (sdpa can produce NaN rows) must not leak into the scores.
    doc_nan = doc.clone()
    doc_nan[0, 2] = float("nan")
    query_nan = torch.cat([query, torch.full((1, 1, 2), float("nan"))], dim=1)
    score_nan = maxsim_scores(query_nan, doc_nan, torch.tensor([[True, True, False]]), mask)
    assert score_nan.item() == pytest.approx(score.item())


def test_maxsim_padding_gets_no_gradient_and_empty_document_raises() -> None:
    query = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    doc = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    qmask = torch.tensor([[True, True, False], [True, False, False]])
    dmask = torch.tensor([[True] * 5, [True, True, False, False, False], [True, False, False, False, False]])
    maxsim_scores(query, doc, qmask, dmask).sum().backward()
    assert query.grad is not None and doc.grad is not None
    assert torch.all(query.grad[~qmask] == 0)
    assert torch.all(doc.grad[~dmask] == 0)
    assert query.grad[qmask].abs().sum() > 0
    with pytest.raises(ValueError, match="no unmasked token"):
        maxsim_scores(query.detach(), doc.detach(), qmask, torch.zeros(3, 5, dtype=torch.bool))


def test_maxsim_gradcheck() -> None:
    g = torch.Generator().manual_seed(1)
    query = torch.randn(2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    doc = torch.randn(3, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    qmask = torch.tensor([[True, True, False], [True, True, True]])
    dmask = torch.tensor([[True, True, True, False], [True, False, False, False], [True] * 4])
    assert torch.autograd.gradcheck(
        lambda q, d: maxsim_scores(q, d, qmask, dmask, normalize=True), (query, doc), eps=1e-6, atol=1e-5
    )


# --------------------------------------------------------------------------- InfoNCE


def test_multi_positive_infonce_hand_computed() -> None:
    # q0: positives d0, d1. q1: positives d1 (shared with q0) and d2. q2: no positive (left out of the mean).
    scores = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 3.0], [5.0, -1.0, 0.5]], dtype=torch.float64)
    relevance = torch.tensor([[1, 2, 0], [0, 1, 1], [0, 0, 0]])
    e = math.exp
    l0 = -math.log((e(2) + e(1)) / (e(2) + e(1) + e(0)))
    l1 = -math.log((e(1) + e(3)) / (e(0) + e(1) + e(3)))
    value = multi_positive_infonce(scores, relevance, temperature=1.0)
    assert value.item() == pytest.approx((l0 + l1) / 2, rel=1e-12)
    # Temperature scales the scores before the softmax.
    tau = 0.5
    l0t = -math.log((e(2 / tau) + e(1 / tau)) / (e(2 / tau) + e(1 / tau) + e(0)))
    l1t = -math.log((e(1 / tau) + e(3 / tau)) / (e(0) + e(1 / tau) + e(3 / tau)))
    assert multi_positive_infonce(scores, relevance, temperature=tau).item() == pytest.approx((l0t + l1t) / 2)


def test_positive_of_another_query_is_a_negative_unless_labelled() -> None:
    scores = torch.tensor([[2.0, 1.0, 0.5], [0.0, 1.0, 3.0]], dtype=torch.float64)
    # d2 is q1's positive and sits in q0's batch: for q0 it is a negative ...
    relevance = torch.tensor([[1, 0, 0], [0, 0, 1]])
    e = math.exp
    l0 = -math.log(e(2) / (e(2) + e(1) + e(0.5)))
    l1 = -math.log(e(3) / (e(0) + e(1) + e(3)))
    assert multi_positive_infonce(scores, relevance, temperature=1.0).item() == pytest.approx((l0 + l1) / 2)
    # ... unless the labels say it is relevant to q0 too: then it is a positive for both.
    shared = torch.tensor([[1, 0, 1], [0, 0, 1]])
    l0_shared = -math.log((e(2) + e(0.5)) / (e(2) + e(1) + e(0.5)))
    assert multi_positive_infonce(scores, shared, temperature=1.0).item() == pytest.approx((l0_shared + l1) / 2)


def test_reduces_to_standard_infonce_with_one_positive() -> None:
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(4, 6, generator=g, dtype=torch.float64)
    targets = torch.tensor([0, 3, 5, 1])
    relevance = torch.zeros(4, 6, dtype=torch.long)
    relevance[torch.arange(4), targets] = 1
    tau = 0.3
    logits = scores / tau
    expected = float((torch.logsumexp(logits, dim=1) - logits[torch.arange(4), targets]).mean())
    assert multi_positive_infonce(scores, relevance, temperature=tau).item() == pytest.approx(expected, rel=1e-12)
    assert infonce(scores, targets, temperature=tau).item() == pytest.approx(expected, rel=1e-12)


def test_single_positive_infonce_counts_other_positives_as_negatives() -> None:
    scores = torch.tensor([[2.0, 1.5, 0.0]], dtype=torch.float64)
    relevance = torch.tensor([[1, 1, 0]])
    e = math.exp
    single = -math.log(e(2) / (e(2) + e(1.5) + e(0)))
    multi = -math.log((e(2) + e(1.5)) / (e(2) + e(1.5) + e(0)))
    assert infonce(scores, torch.tensor([0]), temperature=1.0).item() == pytest.approx(single)
    assert multi_positive_infonce(scores, relevance, temperature=1.0).item() == pytest.approx(multi)
    assert multi < single
    # Ignored targets leave the mean; no target at all gives an attached 0.
    two = torch.tensor([[2.0, 1.5, 0.0], [9.0, 0.0, 0.0]], dtype=torch.float64)
    assert infonce(two, torch.tensor([0, IGNORE_TARGET]), temperature=1.0).item() == pytest.approx(single)
    s = torch.zeros(2, 3, requires_grad=True)
    zero = infonce(s, torch.tensor([IGNORE_TARGET, IGNORE_TARGET]))
    assert zero.item() == 0.0
    zero.backward()
    assert s.grad is not None
    with pytest.raises(ValueError, match="targets"):
        infonce(two, torch.tensor([0, 3]))


def test_no_positive_in_batch_gives_attached_zero() -> None:
    s = torch.randn(2, 3, requires_grad=True)
    value = multi_positive_infonce(s, torch.zeros(2, 3, dtype=torch.long))
    assert value.item() == 0.0
    value.backward()
    assert torch.all(s.grad == 0)


def test_contrastive_gradcheck() -> None:
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    relevance = torch.tensor([[1, 2, 0, 0, 0], [0, 1, 0, 1, 0], [0, 0, 0, 0, 0]])
    assert torch.autograd.gradcheck(lambda s: multi_positive_infonce(s, relevance, temperature=0.7), (scores,))
    targets = torch.tensor([1, 3, IGNORE_TARGET])
    assert torch.autograd.gradcheck(lambda s: infonce(s, targets, temperature=0.7), (scores,))


# --------------------------------------------------------------------------- ApproxNDCG


def test_exact_ndcg_hand_computed_and_against_metrics() -> None:
    scores = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [0.1, 0.3, 0.2]], dtype=torch.float64)
    relevance = torch.tensor([[0, 1, 0], [0, 0, 1], [2, 1, 0]])
    values, valid = exact_ndcg(scores, relevance, k=2)
    assert valid.tolist() == [True, True, True]
    assert values[0].item() == pytest.approx(1 / math.log2(3))  # relevant at rank 2
    assert values[1].item() == 0.0  # relevant at rank 3, cut at k=2
    ideal = 2 + 1 / math.log2(3)
    assert values[2].item() == pytest.approx(1 / ideal)  # ranking d1 (gain 1), d2 (0); d0 (gain 2) is cut
    from docpc_retrievers.eval.metrics import ndcg_at_k

    g = torch.Generator().manual_seed(4)
    s = torch.randn(5, 9, generator=g, dtype=torch.float64)
    rel = torch.randint(0, 4, (5, 9), generator=g)
    mine, _ = exact_ndcg(s, rel, k=5)
    for q in range(5):
        ranking = [f"d{j}" for j in torch.argsort(s[q], descending=True).tolist()]
        labels = {f"d{j}": int(rel[q, j]) for j in range(9) if rel[q, j] > 0}
        assert mine[q].item() == pytest.approx(ndcg_at_k(ranking, labels, 5))


def test_approx_ndcg_tends_to_exact_as_alpha_shrinks() -> None:
    g = torch.Generator().manual_seed(5)
    # Distinct scores at least 0.05 apart.
    scores = torch.stack([torch.randperm(12, generator=g).double() * 0.05 for _ in range(4)])
    relevance = torch.randint(0, 3, (4, 12), generator=g)
    relevance[:, 0] = 1  # every query has a positive
    exact, valid = exact_ndcg(scores, relevance, k=5)
    assert valid.all()
    errors = []
    for alpha in (0.5, 0.05, 0.005, 0.0005):
        approx, _ = approx_ndcg(scores, relevance, k=5, alpha=alpha)
        errors.append(float((approx - exact).abs().max()))
    assert errors[0] > 1e-2  # a soft approximation really differs ...
    assert all(a >= b for a, b in zip(errors, errors[1:]))  # ... and the gap shrinks with alpha
    assert errors[-1] < 1e-6
    for gain in ("linear", "exponential"):
        exact_g, _ = exact_ndcg(scores, relevance, k=3, gain=gain)
        approx_g, _ = approx_ndcg(scores, relevance, k=3, alpha=1e-4, gain=gain)
        assert torch.allclose(approx_g, exact_g, atol=1e-6)
    # Loss form: 1 - mean over queries with a positive (a query without one is left out).
    relevance[3] = 0
    loss = approx_ndcg_loss(scores, relevance, k=5, alpha=1e-4)
    exact3, valid3 = exact_ndcg(scores, relevance, k=5)
    assert valid3.tolist() == [True, True, True, False]
    assert loss.item() == pytest.approx(1 - float(exact3[:3].mean()), abs=1e-6)


def test_exponential_gain_differs_from_linear() -> None:
    scores = torch.tensor([[0.3, 0.2, 0.1]], dtype=torch.float64)
    relevance = torch.tensor([[1, 3, 0]])
    lin, _ = exact_ndcg(scores, relevance, k=3, gain="linear")
    exp, _ = exact_ndcg(scores, relevance, k=3, gain="exponential")
    assert lin.item() == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))
    assert exp.item() == pytest.approx((1 + 7 / math.log2(3)) / (7 + 1 / math.log2(3)))


def test_approx_ndcg_gradcheck() -> None:
    g = torch.Generator().manual_seed(6)
    scores = torch.randn(3, 6, generator=g, dtype=torch.float64, requires_grad=True)
    relevance = torch.tensor([[2, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])
    assert torch.autograd.gradcheck(
        lambda s: approx_ndcg_loss(s, relevance, k=3, alpha=0.5, truncation_temperature=0.7), (scores,)
    )
    assert torch.autograd.gradcheck(lambda s: approx_ndcg(s, relevance, k=3, alpha=0.3)[0], (scores,))


# --------------------------------------------------------------------------- combined loss and schedule


def _scores_and_labels() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    scores = torch.randn(3, 5, generator=g, dtype=torch.float64)
    relevance = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 2, 0, 1], [0, 1, 0, 1, 0]])
    targets = torch.tensor([0, 2, 3])
    return scores, relevance, targets


def test_combined_loss_applies_listwise_exactly_at_multiples_of_m() -> None:
    scores, relevance, targets = _scores_and_labels()
    mp = multi_positive_infonce(scores, relevance, temperature=0.1).item()
    lw = approx_ndcg_loss(scores, relevance, k=5, alpha=0.2).item()
    loss = CombinedLoss("combined", temperature=0.1, listwise_every=4, listwise_weight=0.5, listwise_alpha=0.2)
    applied = []
    for _ in range(12):
        out = loss(scores, relevance, targets)
        if out.listwise_applied:
            applied.append(out.step)
            assert out.total.item() == pytest.approx(mp + 0.5 * lw)
        else:
            assert out.total.item() == pytest.approx(mp)
        assert out.contrastive.item() == pytest.approx(mp)
        assert out.listwise.item() == pytest.approx(lw)  # logged even when not applied
        loss.advance()
    assert applied == [4, 8, 12]
    every = CombinedLoss("combined", listwise_every=1)
    steps = []
    for _ in range(3):
        steps.append(every(scores, relevance).listwise_applied)
        every.advance()
    assert steps == [True, True, True]


def test_listwise_schedule_survives_resume() -> None:
    scores, relevance, _ = _scores_and_labels()
    first = CombinedLoss("combined", listwise_every=4)
    for _ in range(6):
        first(scores, relevance)
        first.advance()
    state = json.loads(json.dumps(first.state_dict()))  # as stored in trainer_state/state.json
    resumed = CombinedLoss("combined", listwise_every=4)
    resumed.load_state_dict(state)
    assert resumed.current_step == 7
    applied = []
    for _ in range(6):
        out = resumed(scores, relevance)
        applied.append((out.step, out.listwise_applied))
        resumed.advance()
    assert [s for s, a in applied if a] == [8, 12]
    assert [s for s, _ in applied] == [7, 8, 9, 10, 11, 12]


def test_variants() -> None:
    scores, relevance, targets = _scores_and_labels()
    scores = scores.clone().requires_grad_(True)
    mp_only = CombinedLoss("mp-infonce", listwise_every=1)
    out = mp_only(scores, relevance)
    assert not out.listwise_applied and out.total.item() == pytest.approx(out.contrastive.item())
    listwise = CombinedLoss("listwise", listwise_every=40)
    out = listwise(scores, relevance)
    assert out.listwise_applied and not out.contrastive_applied
    assert out.total.item() == pytest.approx(out.listwise.item())
    assert not out.contrastive.requires_grad  # computed for the log only
    single = CombinedLoss("infonce", temperature=0.1)
    out = single(scores, relevance, targets)
    assert out.total.item() == pytest.approx(infonce(scores, targets, temperature=0.1).item())
    with pytest.raises(ValueError, match="targets"):
        single(scores, relevance)
    with pytest.raises(ValueError, match="unknown loss variant"):
        CombinedLoss("contrastive")
    with pytest.raises(ValueError, match="listwise_every"):
        CombinedLoss("combined", listwise_every=0)


def test_combined_loss_gradcheck() -> None:
    scores, relevance, _ = _scores_and_labels()
    scores = scores.clone().requires_grad_(True)
    loss = CombinedLoss("combined", temperature=0.5, listwise_every=1, listwise_weight=2.0, listwise_alpha=0.5)
    assert torch.autograd.gradcheck(lambda s: loss(s, relevance).total, (scores,))


# --------------------------------------------------------------------------- gradient honesty


def _random_batch(seed: int, nq: int = 6, nd: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scores = (torch.rand(nq, nd, generator=g, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    relevance = torch.randint(0, 3, (nq, nd), generator=g)
    relevance[:, seed % nd] = 2  # every query has at least one positive; most have several
    return scores, relevance


@pytest.mark.parametrize("seed", range(8))
def test_multi_positive_infonce_never_pushes_a_labelled_positive_down(seed: int) -> None:
    """dL/dS[q, p] <= 0 for every positive p of every query: a descent step never lowers a positive's score."""
    scores, relevance = _random_batch(seed)
    multi_positive_infonce(scores, relevance, temperature=0.05).backward()
    assert scores.grad is not None
    positive = relevance > 0
    assert (scores.grad[positive] <= 1e-12).all()
    assert (scores.grad[~positive] >= -1e-12).all()  # and never pulls a negative up
    assert (scores.grad[positive] < 0).any()  # the check above is not vacuous


def test_infonce_pushes_a_second_positive_down() -> None:
    """With one target per query, another positive in the batch is a negative: its gradient is positive."""
    scores = torch.tensor([[1.0, 0.9, -0.5, 0.2]], dtype=torch.float64, requires_grad=True)
    infonce(scores, torch.tensor([0]), temperature=0.05).backward()
    assert scores.grad is not None
    assert scores.grad[0, 0] < 0  # the target goes up
    assert scores.grad[0, 1] > 0  # the second positive (document 1) goes down, as hard as any negative
    assert scores.grad[0, 1] > scores.grad[0, 3] > scores.grad[0, 2] > 0
    scores.grad = None
    multi_positive_infonce(scores, torch.tensor([[1, 1, 0, 0]]), temperature=0.05).backward()
    assert scores.grad[0, 1] < 0  # the multi-positive loss pulls it up instead


@pytest.mark.parametrize("alpha", [0.5, 0.05, 0.005])
def test_approx_ndcg_loss_gradient_raises_positives_above_negatives(alpha: float) -> None:
    """The listwise loss's gradient ranks: on average it raises positives and lowers negatives, at every temperature."""
    scores, relevance = _random_batch(3, nq=4, nd=10)
    approx_ndcg_loss(scores, relevance, k=5, alpha=alpha).backward()
    assert scores.grad is not None
    positive = relevance > 0
    assert float(scores.grad[positive].mean()) < 0 < float(scores.grad[~positive].mean())


def test_approx_ndcg_error_shrinks_with_temperature_on_many_random_lists() -> None:
    """Across random lists (ties excluded), the worst gap to exact NDCG@5 falls as alpha falls."""
    g = torch.Generator().manual_seed(11)
    scores = torch.stack([torch.randperm(20, generator=g).double() * 0.03 for _ in range(32)])
    relevance = torch.randint(0, 4, (32, 20), generator=g)
    relevance[:, 0] = 3
    exact, _ = exact_ndcg(scores, relevance, k=5)
    gaps = [float((approx_ndcg(scores, relevance, k=5, alpha=a)[0] - exact).abs().max())
            for a in (0.3, 0.03, 0.003, 0.0003)]
    assert gaps == sorted(gaps, reverse=True) and gaps[0] > 0.05 and gaps[-1] < 1e-6
