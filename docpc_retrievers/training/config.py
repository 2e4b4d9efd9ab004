"""What a training run is asked to do (:class:`TrainingConfig`) and what it did (:class:`TrainingResult`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from docpc_retrievers.training.data import GridSpec
from docpc_retrievers.training.losses import (
    DEFAULT_LISTWISE_ALPHA,
    DEFAULT_LISTWISE_EVERY,
    DEFAULT_LISTWISE_K,
    DEFAULT_TEMPERATURE,
    GAINS,
    LOSS_VARIANTS,
    CombinedLoss,
)

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_LORA_TARGET_MODULES", "RESUMABLE_CHANGES", "TrainingConfig", "TrainingResult"]

#: peft ``target_modules`` regex: attention and MLP projections outside the vision tower, plus the
#: ``custom_text_proj`` head (colpali-engine's ColQwen2 LoRA recipe; works for the other families' names).
DEFAULT_LORA_TARGET_MODULES = (
    r"^(?!.*(visual|vision)).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$"
    r"|^(.*\.)?custom_text_proj$"
)
#: Settings that may change between a run and its resume without a warning.
RESUMABLE_CHANGES = frozenset(
    {"epochs", "max_steps", "save_every", "keep_checkpoints", "eval_every", "eval_k", "log_every", "progress", "device"}
)


@dataclass
class TrainingConfig:
    """Everything that shapes a training run (recorded in every checkpoint as JSON).

    Loss: ``loss`` (one of :data:`~docpc_retrievers.training.losses.LOSS_VARIANTS`),
    ``temperature`` (tau), ``listwise_every`` (m), ``listwise_weight`` (lambda),
    ``listwise_k``, ``listwise_alpha``, ``truncation_temperature``, ``gain``;
    ``normalize_scores`` divides MaxSim by the query length (as colpali-engine's ColbertLoss).
    Data: ``grid`` (how documents become grids), ``max_num_visual_tokens`` (Qwen families),
    ``batch_size`` (queries per micro-batch), ``max_docs_per_batch``, ``negatives_per_batch``.
    Model: ``lora`` (else full fine-tuning), ``lora_rank``, ``lora_alpha``, ``lora_dropout``,
    ``lora_target_modules`` (peft regex or list). Optimisation: ``epochs``, ``max_steps``,
    ``gradient_accumulation``, ``learning_rate``, ``weight_decay``, ``warmup_steps`` (default:
    ``warmup_ratio`` of all steps), ``lr_schedule`` (``linear`` decay or ``constant`` after
    warm-up), ``max_grad_norm``, ``gradient_checkpointing``, ``bf16`` (None: on CUDA only),
    ``device``, ``seed``. Bookkeeping: ``save_every`` (steps; None = only the final
    checkpoint), ``keep_checkpoints``, ``eval_every`` (steps; the final step is always
    evaluated when evaluation data is given), ``eval_k``, ``log_every``, ``progress``.
    """

    loss: str = "combined"
    temperature: float = DEFAULT_TEMPERATURE
    listwise_every: int = DEFAULT_LISTWISE_EVERY
    listwise_weight: float = 1.0
    listwise_k: int = DEFAULT_LISTWISE_K
    listwise_alpha: float = DEFAULT_LISTWISE_ALPHA
    truncation_temperature: float | None = None
    gain: str = "linear"
    normalize_scores: bool = True
    grid: GridSpec = field(default_factory=GridSpec)
    max_num_visual_tokens: int | None = None
    batch_size: int = 8
    max_docs_per_batch: int | None = None
    negatives_per_batch: int = 0
    lora: bool = True
    lora_rank: int = 32
    lora_alpha: float = 32.0
    lora_dropout: float = 0.1
    lora_target_modules: str | list[str] = DEFAULT_LORA_TARGET_MODULES
    epochs: int = 1
    max_steps: int | None = None
    gradient_accumulation: int = 1
    learning_rate: float = 2e-4
    weight_decay: float = 0.0
    warmup_steps: int | None = None
    warmup_ratio: float = 0.05
    lr_schedule: str = "linear"
    max_grad_norm: float | None = 1.0
    gradient_checkpointing: bool = False
    bf16: bool | None = None
    device: str | None = None
    seed: int = 0
    save_every: int | None = None
    keep_checkpoints: int = 1
    eval_every: int | None = None
    eval_k: int = 5
    log_every: int = 10
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.grid, Mapping):
            self.grid = GridSpec.from_dict(self.grid)
        if self.loss not in LOSS_VARIANTS:
            raise ValueError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSS_VARIANTS)}")
        if self.gain not in GAINS:
            raise ValueError(f"unknown gain {self.gain!r}; choose one of {', '.join(GAINS)}")
        if self.lr_schedule not in ("linear", "constant"):
            raise ValueError(f"lr_schedule must be 'linear' or 'constant', got {self.lr_schedule!r}")
        positive_ints = {
            "listwise_every": self.listwise_every,
            "listwise_k": self.listwise_k,
            "batch_size": self.batch_size,
            "lora_rank": self.lora_rank,
            "epochs": self.epochs,
            "gradient_accumulation": self.gradient_accumulation,
            "keep_checkpoints": self.keep_checkpoints,
            "eval_k": self.eval_k,
            "log_every": self.log_every,
        }
        for name, value in positive_ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("max_steps", "save_every", "eval_every", "max_docs_per_batch", "max_num_visual_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        if self.negatives_per_batch < 0:
            raise ValueError(f"negatives_per_batch must be >= 0, got {self.negatives_per_batch}")
        for name in ("temperature", "learning_rate", "listwise_alpha", "lora_alpha"):
            value = float(getattr(self, name))
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if not math.isfinite(self.listwise_weight) or self.listwise_weight < 0:
            raise ValueError(f"listwise_weight must be >= 0, got {self.listwise_weight!r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (the grid spec as a nested dict)."""
        data = asdict(self)
        data["grid"] = self.grid.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingConfig:
        """Rebuild from :meth:`to_dict` output; unknown keys are ignored (with a debug log)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            logger.debug("ignoring unknown training config keys %s", unknown)
        kwargs = {k: v for k, v in data.items() if k in names}
        if "grid" in kwargs and isinstance(kwargs["grid"], Mapping):
            kwargs["grid"] = GridSpec.from_dict(kwargs["grid"])
        return cls(**kwargs)

    def make_loss(self) -> CombinedLoss:
        """The :class:`CombinedLoss` these settings describe (step counter at 0)."""
        return CombinedLoss(
            self.loss,
            temperature=self.temperature,
            listwise_every=self.listwise_every,
            listwise_weight=self.listwise_weight,
            listwise_k=self.listwise_k,
            listwise_alpha=self.listwise_alpha,
            truncation_temperature=self.truncation_temperature,
            gain=self.gain,
        )


@dataclass
class TrainingResult:
    """What a :meth:`Trainer.train` call did.

    ``history``: one dict per optimisation step (``step``, ``loss``, ``contrastive``,
    ``listwise``, ``listwise_applied``, ``lr``, ``epoch``); ``evaluations``: ``{"step": ...,
    "ndcg@k": ...}`` dicts. ``steps_per_second`` counts the steps of this call only;
    ``peak_rss_mb`` is the process's peak resident memory (``resource.getrusage``),
    ``peak_cuda_mb`` the peak CUDA memory allocated by torch (None on CPU).
    """

    out_dir: Path
    step: int
    epoch: int
    steps_this_run: int
    seconds: float
    steps_per_second: float
    peak_rss_mb: float
    peak_cuda_mb: float | None
    history: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    resumed_from: Path | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (paths as strings)."""
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        data["resumed_from"] = None if self.resumed_from is None else str(self.resumed_from)
        return data
