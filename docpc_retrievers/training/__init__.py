"""Fine-tuning ColPali-family checkpoints on composed document grids (``docpc train``).

- :mod:`.losses`: differentiable padded MaxSim, multi-positive InfoNCE, single-positive
  InfoNCE, ``1 - ApproxNDCG@K`` and the scheduled :class:`CombinedLoss`.
- :mod:`.data`: labelled corpus -> cached grid images -> multi-positive batches.
- :mod:`.trainer`: the :class:`Trainer` (LoRA or full fine-tuning, checkpoints, resume).

Names are resolved lazily so that importing this package does not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docpc_retrievers.training.data import (
        GridDataset,
        GridSpec,
        MultiPositiveBatchSampler,
        TrainingBatch,
        TrainingQuery,
    )
    from docpc_retrievers.training.losses import (
        LOSS_VARIANTS,
        CombinedLoss,
        LossOutput,
        approx_ndcg,
        approx_ndcg_loss,
        exact_ndcg,
        infonce,
        maxsim_scores,
        multi_positive_infonce,
    )
    from docpc_retrievers.training.trainer import (
        Trainer,
        TrainingConfig,
        TrainingResult,
        evaluate_ndcg,
        find_resume_checkpoint,
    )

__all__ = [
    "LOSS_VARIANTS",
    "CombinedLoss",
    "GridDataset",
    "GridSpec",
    "LossOutput",
    "MultiPositiveBatchSampler",
    "Trainer",
    "TrainingBatch",
    "TrainingConfig",
    "TrainingQuery",
    "TrainingResult",
    "approx_ndcg",
    "approx_ndcg_loss",
    "evaluate_ndcg",
    "exact_ndcg",
    "find_resume_checkpoint",
    "infonce",
    "maxsim_scores",
    "multi_positive_infonce",
]

_LAZY = {
    "GridDataset": "data",
    "GridSpec": "data",
    "MultiPositiveBatchSampler": "data",
    "TrainingBatch": "data",
    "TrainingQuery": "data",
    "LOSS_VARIANTS": "losses",
    "CombinedLoss": "losses",
    "LossOutput": "losses",
    "approx_ndcg": "losses",
    "approx_ndcg_loss": "losses",
    "exact_ndcg": "losses",
    "infonce": "losses",
    "maxsim_scores": "losses",
    "multi_positive_infonce": "losses",
    "Trainer": "trainer",
    "TrainingConfig": "trainer",
    "TrainingResult": "trainer",
    "evaluate_ndcg": "trainer",
    "find_resume_checkpoint": "trainer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
