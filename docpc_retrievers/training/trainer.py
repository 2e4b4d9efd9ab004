"""Fine-tune a ColPali-family checkpoint on composed document grids (``docpc train``).

Why this module exists: users with their own document collections want the model to rank
*their* documents well, and document-level retrieval has several relevant documents per
query. :class:`Trainer` fine-tunes any checkpoint :class:`~docpc_retrievers.encoders.ColPaliEncoder`
loads, on grids built like the index builds them, with the losses of
:mod:`docpc_retrievers.training.losses`:

- LoRA adapters (peft) on the language model's attention/MLP projections and the
  ``custom_text_proj`` head by default (colpali-engine's own ColQwen2 recipe), or full
  fine-tuning; AdamW, linear warm-up then linear decay, gradient accumulation, bf16 autocast
  on CUDA, optional gradient checkpointing.
- Checkpoints are ordinary colpali-engine model folders (LoRA weights merged), so
  ``ColPaliEncoder(OUT)`` and ``docpc index --model OUT`` load them directly. Next to the
  weights, ``trainer_state/`` holds what a resume needs: ``state.json`` (step, epoch,
  position in the epoch, loss schedule, config) and ``state.pt`` (optimizer, scheduler,
  LoRA tensors, RNG state; only tensors and plain containers, loadable with
  ``torch.load(weights_only=True)``). A resumed run continues at the same step, so the
  listwise schedule (steps m, 2m, ...) is unchanged.
- Both loss terms are logged separately (``logging`` and a tqdm progress bar); an optional
  held-out evaluation reports NDCG@5 (trec_eval conventions, :mod:`docpc_retrievers.eval.metrics`).

Layout of ``OUT``: the final model (config, weights, processor files, ``docpc_training.json``)
and its ``trainer_state/``; ``checkpoint-<step>/`` folders (same content) when
``save_every`` is set; ``grid-cache/`` with the rendered training grids.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any


from docpc_retrievers import __version__
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import DocPCError
from docpc_retrievers.scoring.maxsim import maxsim_reference
from docpc_retrievers.training.data import GridDataset, GridSpec, LabelledCorpusLike, MultiPositiveBatchSampler, TrainingBatch
from docpc_retrievers.training.losses import (
    DEFAULT_LISTWISE_ALPHA,
    DEFAULT_LISTWISE_EVERY,
    DEFAULT_LISTWISE_K,
    DEFAULT_TEMPERATURE,
    GAINS,
    LOSS_VARIANTS,
    CombinedLoss,
    LossOutput,
    maxsim_scores,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "CHECKPOINT_PREFIX",
    "DEFAULT_LORA_TARGET_MODULES",
    "STATE_DIR",
    "TRAINING_INFO_FILE",
    "Trainer",
    "TrainingConfig",
    "TrainingResult",
    "evaluate_ndcg",
    "find_resume_checkpoint",
]

logger = logging.getLogger(__name__)

#: peft ``target_modules`` regex: attention and MLP projections outside the vision tower, plus the
#: ``custom_text_proj`` head (colpali-engine's ColQwen2 LoRA recipe; works for the other families' names).
DEFAULT_LORA_TARGET_MODULES = (
    r"^(?!.*(visual|vision)).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$"
    r"|^(.*\.)?custom_text_proj$"
)
#: Sub-folder of a checkpoint holding the resume state.
STATE_DIR = "trainer_state"
#: Provenance file written next to the weights of every checkpoint.
TRAINING_INFO_FILE = "docpc_training.json"
#: Intermediate checkpoints are ``OUT/checkpoint-<step>``.
CHECKPOINT_PREFIX = "checkpoint-"
_STATE_FORMAT = 1
#: Settings that may change between a run and its resume without a warning.
_RESUMABLE_CHANGES = frozenset(
    {"epochs", "max_steps", "save_every", "keep_checkpoints", "eval_every", "eval_k", "log_every", "progress", "device"}
)
_GRID_CACHE = "grid-cache"


# --------------------------------------------------------------------------- configuration


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


# --------------------------------------------------------------------------- evaluation


def evaluate_ndcg(
    encoder: ColPaliEncoder,
    dataset: GridDataset,
    *,
    k: int = 5,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """NDCG@k (and recall@10) of ``encoder`` ranking every document of ``dataset`` for each of its queries.

    Documents are the dataset's grids (exhaustive MaxSim, no index); metrics follow trec_eval
    (:func:`docpc_retrievers.eval.metrics.evaluate_run`: linear gains, ties by doc id descending,
    mean over all labelled queries). Returns ``{"ndcg@k": mean, "recall@10": mean (the share of
    each query's positives in its top 10), "per_query": {qid: NDCG@k}, "queries": n, "documents": n}``.
    """
    from docpc_retrievers.eval.metrics import evaluate_run

    doc_ids = dataset.doc_ids
    queries = dataset.queries
    if not queries:
        raise DocPCError("the evaluation set has no query with a positive document")
    doc_embeddings = encoder.encode_images(dataset.grids(doc_ids), batch_size=batch_size)
    query_embeddings = encoder.encode_queries([q.text for q in queries], batch_size=batch_size)
    run = {
        q.query_id: {d: maxsim_reference(qe, de) for d, de in zip(doc_ids, doc_embeddings)}
        for q, qe in zip(queries, query_embeddings)
    }
    name = f"ndcg@{k}"
    result = evaluate_run(dataset.qrels(), run, metrics=("ndcg", "recall"), ks=tuple(sorted({k, 10})))
    return {
        name: result.mean[name],
        "recall@10": result.mean["recall@10"],
        "per_query": {qid: values[name] for qid, values in result.per_query.items()},
        "queries": len(queries),
        "documents": len(doc_ids),
    }


# --------------------------------------------------------------------------- checkpoints on disk


def _read_state_json(folder: Path) -> dict[str, Any] | None:
    path = folder / STATE_DIR / "state.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == _STATE_FORMAT else None


def find_resume_checkpoint(out_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under ``out_dir`` (the folder itself or ``checkpoint-*``).

    A checkpoint is complete when ``trainer_state/state.json``, ``trainer_state/state.pt`` and
    ``docpc_training.json`` exist and agree on the step. None when there is nothing to resume.
    """
    out = Path(out_dir)
    candidates = [out, *sorted(p for p in out.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir())] if out.is_dir() else []
    best: tuple[int, Path] | None = None
    for folder in candidates:
        state = _read_state_json(folder)
        if state is None or not (folder / STATE_DIR / "state.pt").is_file():
            continue
        try:
            info = json.loads((folder / TRAINING_INFO_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if info.get("step") != state.get("step"):
            logger.warning("ignoring incomplete checkpoint %s (model and trainer state disagree)", folder)
            continue
        step = int(state["step"])
        if best is None or step > best[0] or (step == best[0] and folder == out):
            best = (step, folder)
    return None if best is None else best[1]


# --------------------------------------------------------------------------- trainer


@contextmanager
def _right_padding(processor: Any) -> Iterator[None]:
    """Pad queries on the right while training.

    colpali-engine pads on the left; with sdpa attention a left-padded row attends to nothing,
    its hidden state is NaN, and although the output masks it, the NaN poisons the gradients.
    With right padding the real tokens' embeddings are the same (causal attention) and every
    row stays finite.
    """
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None:
        yield
        return
    before = tokenizer.padding_side
    tokenizer.padding_side = "right"
    try:
        yield
    finally:
        tokenizer.padding_side = before


class Trainer:
    """Fine-tunes ``base_model`` on a labelled corpus; see the module docstring for what it writes.

    ``base_model``: hub id or local folder :class:`ColPaliEncoder` can load. ``train_data``: a
    labelled corpus (``labels.LabelledCorpus``) or a ready :class:`GridDataset` (its spec must
    equal ``config.grid``). ``out_dir``: where checkpoints go. ``eval_data``: optional held-out
    labelled corpus or dataset for NDCG@k during training. ``cache_dir``: grid cache folder
    (default ``OUT/grid-cache``; pass ``False`` for memory only). ``encoder_kwargs``: extra
    :class:`ColPaliEncoder` arguments (``family``, ``local_files_only``, ...).
    """

    def __init__(
        self,
        base_model: str | Path,
        train_data: LabelledCorpusLike | GridDataset,
        out_dir: str | Path,
        config: TrainingConfig | None = None,
        *,
        eval_data: LabelledCorpusLike | GridDataset | None = None,
        cache_dir: str | Path | bool | None = None,
        encoder_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config or TrainingConfig()
        self.base_model = str(base_model)
        self.out_dir = Path(out_dir)
        if cache_dir is None:
            cache: Path | None = self.out_dir / _GRID_CACHE
        elif cache_dir is False:
            cache = None
        elif cache_dir is True:
            cache = self.out_dir / _GRID_CACHE
        else:
            cache = Path(cache_dir)
        self.train_data = self._dataset(train_data, cache)
        self.eval_data = None if eval_data is None else self._dataset(eval_data, cache)
        self.encoder_kwargs = dict(encoder_kwargs or {})
        self.encoder: ColPaliEncoder | None = None
        self._module: Any = None  # what forward() is called on: the peft model or the base model

    def _dataset(self, data: LabelledCorpusLike | GridDataset, cache: Path | None) -> GridDataset:
        if isinstance(data, GridDataset):
            if data.spec != self.config.grid:
                raise ValueError(f"dataset grid spec {data.spec} differs from config.grid {self.config.grid}")
            return data
        return GridDataset(data, self.config.grid, cache_dir=cache)

    # ------------------------------------------------------------- model

    def _device_and_dtype(self) -> tuple[str, Any, bool]:
        import torch

        from docpc_retrievers.encoders import pick_device

        device = pick_device(self.config.device)
        cuda = device.startswith("cuda")
        bf16 = cuda if self.config.bf16 is None else bool(self.config.bf16)
        if bf16 and not cuda:
            logger.warning("bf16 autocast is only used on CUDA; training in float32 on %s", device)
            bf16 = False
        # LoRA: frozen base in bf16 on GPU (adapters stay fp32); full fine-tuning keeps fp32 master weights.
        dtype = torch.bfloat16 if (cuda and bf16 and self.config.lora) else torch.float32
        return device, dtype, bf16

    def _load_encoder(self, model: str | Path, device: str, dtype: Any) -> ColPaliEncoder:
        """Load through the encoder (the same path ``docpc index`` uses); apply the train-time token cap."""
        kwargs = {"batch_size": 8, **self.encoder_kwargs, "device": device, "dtype": dtype}
        encoder = ColPaliEncoder(model, **kwargs)
        self._original_longest_edge = None
        cap = self.config.max_num_visual_tokens
        if cap is not None:
            if not encoder.has_patch_grid:
                raise ValueError(
                    f"max_num_visual_tokens is only supported for dynamic-resolution (Qwen) families, not {encoder.family}"
                )
            # Remember the checkpoint's own cap: the saved processor keeps it (the train-time cap is a run setting).
            self._original_longest_edge = encoder.processor.image_processor.size["longest_edge"]
            encoder.set_max_visual_tokens(cap)
        return encoder

    def _prepare_model(self, encoder: ColPaliEncoder) -> Any:
        """Enable gradient checkpointing and wrap with LoRA (or unfreeze everything); returns the module to call."""
        model = encoder.model
        cfg = self.config
        if cfg.gradient_checkpointing:
            if not getattr(model, "supports_gradient_checkpointing", False):
                raise DocPCError(f"{type(model).__name__} does not support gradient checkpointing")
            enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.lora:
            from peft import LoraConfig, get_peft_model

            lora_config = LoraConfig(
                r=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                target_modules=cfg.lora_target_modules,
                init_lora_weights="gaussian",
                bias="none",
            )
            try:
                with warnings.catch_warnings():
                    # peft asks transformers' deprecated is_gradient_checkpointing: not actionable here.
                    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                    module = get_peft_model(model, lora_config)
            except ValueError as exc:
                raise DocPCError(f"cannot add LoRA adapters to {encoder.model_id!r}: {exc}") from exc
        else:
            for parameter in model.parameters():
                parameter.requires_grad_(True)
            module = model
        trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
        total = sum(p.numel() for p in module.parameters())
        logger.info(
            "%s: %s trainable parameters of %s (%.2f%%)",
            "LoRA" if cfg.lora else "full fine-tuning", f"{trainable:,}", f"{total:,}", 100.0 * trainable / max(total, 1),
        )
        return module

    def _trainable(self) -> dict[str, Any]:
        return {n: p for n, p in self._module.named_parameters() if p.requires_grad}

    # ------------------------------------------------------------- forward

    def _to_device(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        assert self.encoder is not None
        dtype = next(self.encoder.model.parameters()).dtype
        return {
            key: (value.to(self.encoder.device, dtype=dtype) if value.is_floating_point() else value.to(self.encoder.device))
            if isinstance(value, torch.Tensor)
            else value
            for key, value in batch.items()
        }

    def _doc_mask(self, inputs: Mapping[str, Any]) -> Any:
        assert self.encoder is not None
        mask = inputs["attention_mask"].bool()
        if self.encoder.mask_non_image_embeddings and self.encoder._image_token_id is not None:
            mask = mask & (inputs["input_ids"] == self.encoder._image_token_id)
        return mask

    def batch_scores(self, batch: TrainingBatch) -> Any:
        """Differentiable ``[nq, nd]`` MaxSim scores of one batch under the current weights."""
        import torch

        assert self.encoder is not None
        processor = self.encoder.processor
        images = self.train_data.grids(batch.doc_ids)
        doc_inputs = self._to_device(processor.process_images(images))
        with _right_padding(processor):
            query_inputs = self._to_device(processor.process_queries(list(batch.query_texts)))
        autocast = (
            torch.autocast(device_type="cuda", dtype=torch.bfloat16) if self._bf16 else nullcontext()
        )
        with autocast:
            doc_embeddings = self._module(**doc_inputs)
            query_embeddings = self._module(**query_inputs)
        return maxsim_scores(
            query_embeddings.float(),
            doc_embeddings.float(),
            query_inputs["attention_mask"],
            self._doc_mask(doc_inputs),
            normalize=self.config.normalize_scores,
        )

    # ------------------------------------------------------------- saving

    def _merged_state_dict(self) -> dict[str, Any]:
        """Base-model state dict with every LoRA delta merged in (no copy of the model, adapters kept)."""
        import torch
        from peft.tuners.lora import LoraLayer

        base = self._module.get_base_model()
        adapter = "default"
        merged: dict[str, Any] = {}
        lora_prefixes: list[str] = []
        with torch.no_grad():
            for name, module in base.named_modules():
                if isinstance(module, LoraLayer) and hasattr(module, "get_delta_weight"):
                    weight = module.get_base_layer().weight
                    merged[f"{name}.weight"] = (weight + module.get_delta_weight(adapter).to(weight.dtype)).detach()
                    lora_prefixes.append(name)
            for key, value in base.state_dict().items():
                if ".lora_" in key:
                    continue
                clean = key.replace(".base_layer.", ".")
                if clean not in merged:
                    merged[clean] = value.detach()
        logger.debug("merged %d LoRA layers into the saved weights", len(lora_prefixes))
        return merged

    def _save_model(self, folder: Path, step: int, epoch: int) -> None:
        """Weights (LoRA merged), processor and ``docpc_training.json`` into ``folder``."""
        assert self.encoder is not None
        model = self.encoder.model
        if self.config.lora:
            self._module.get_base_model().save_pretrained(folder, state_dict=self._merged_state_dict())
        else:
            model.save_pretrained(folder)
        processor = self.encoder.processor
        image_processor = getattr(processor, "image_processor", None)
        size = getattr(image_processor, "size", None)
        original = self._original_longest_edge
        if original is not None and size is not None:  # a SizeDict in transformers 5 (item access works)
            # The train-time visual token cap is a setting of this run, not of the saved checkpoint.
            current = size["longest_edge"]
            size["longest_edge"] = original
            try:
                processor.save_pretrained(folder)
            finally:
                size["longest_edge"] = current
        else:
            processor.save_pretrained(folder)
        info = {
            "format": _STATE_FORMAT,
            "created_by": f"docpc train (docpc-retrievers {__version__})",
            "base_model": self.base_model,
            "base_model_id": self._base_model_id,
            "family": self.encoder.family,
            "step": step,
            "epoch": epoch,
            "lora_merged": bool(self.config.lora),
            "config": self.config.to_dict(),
        }
        (folder / TRAINING_INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")

    def _save_state(self, folder: Path, step: int, epoch: int, batch_in_epoch: int) -> None:
        """``trainer_state/state.pt`` (tensors and plain containers only) then ``state.json``."""
        import torch

        state_dir = folder / STATE_DIR
        state_dir.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, Any] = {
            "optimizer": self._optimizer.state_dict(),
            "scheduler": self._scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }
        if torch.cuda.is_available():
            tensors["cuda_rng"] = torch.cuda.get_rng_state_all()
        if self.config.lora:
            tensors["trainable"] = {n: p.detach().to("cpu").clone() for n, p in self._trainable().items()}
        torch.save(tensors, state_dir / "state.pt")
        state = {
            "format": _STATE_FORMAT,
            "step": step,
            "epoch": epoch,
            "batch_in_epoch": batch_in_epoch,
            "loss_state": self._loss.state_dict(),
            "base_model": self.base_model,
            "base_model_id": self._base_model_id,
            "lora": bool(self.config.lora),
            "config": self.config.to_dict(),
            "history": self._history[-1000:],
            "evaluations": self._evaluations,
        }
        (state_dir / "state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")

    def _write_checkpoint(self, step: int, epoch: int, batch_in_epoch: int, *, final: bool) -> Path:
        """Write a complete checkpoint: ``OUT`` itself when ``final``, else ``OUT/checkpoint-<step>``."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.out_dir / f".saving-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        self._save_model(tmp, step, epoch)
        self._save_state(tmp, step, epoch, batch_in_epoch)
        if final:
            target = self.out_dir
            old_state = target / STATE_DIR
            if old_state.exists():
                shutil.rmtree(old_state)  # first: a crash below then leaves no state that disagrees
            for item in sorted(tmp.iterdir(), key=lambda p: (p.name == TRAINING_INFO_FILE, p.name == STATE_DIR)):
                destination = target / item.name
                if destination.is_dir() and not item.is_dir():
                    shutil.rmtree(destination)
                os.replace(item, destination)
            tmp.rmdir()
        else:
            target = self.out_dir / f"{CHECKPOINT_PREFIX}{step:07d}"
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
            self._prune_checkpoints()
        logger.info("saved checkpoint at step %d to %s", step, target)
        return target

    def _prune_checkpoints(self) -> None:
        folders = sorted(p for p in self.out_dir.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir())
        for stale in folders[: max(0, len(folders) - self.config.keep_checkpoints)]:
            shutil.rmtree(stale, ignore_errors=True)

    # ------------------------------------------------------------- resume

    def _resolve_resume(self, resume: bool | str | Path) -> Path | None:
        if resume is False or resume is None:
            leftovers = [
                p.name for p in self.out_dir.iterdir() if p.name != _GRID_CACHE and not p.name.startswith(".saving-")
            ] if self.out_dir.is_dir() else []
            if leftovers:
                raise DocPCError(
                    f"{self.out_dir} already holds files ({', '.join(sorted(leftovers)[:5])}); "
                    "resume that run (--resume) or choose an empty output folder"
                )
            return None
        if resume is True:
            found = find_resume_checkpoint(self.out_dir)
            if found is None:
                raise DocPCError(f"nothing to resume: no complete checkpoint under {self.out_dir}")
            return found
        folder = Path(resume)
        if _read_state_json(folder) is None:
            raise DocPCError(f"{folder} is not a training checkpoint (no {STATE_DIR}/state.json)")
        return folder

    # ------------------------------------------------------------- training

    def _lr_factor(self, total_steps: int, warmup: int) -> Any:
        schedule = self.config.lr_schedule

        def factor(step: int) -> float:
            if warmup and step < warmup:
                return (step + 1) / (warmup + 1)
            if schedule == "constant":
                return 1.0
            remaining = max(total_steps - step, 0)
            return max(remaining / max(total_steps - warmup, 1), 0.0)

        return factor

    def _evaluate(self, step: int) -> dict[str, Any]:
        assert self.encoder is not None and self.eval_data is not None
        self._module.eval()
        try:
            result = evaluate_ndcg(self.encoder, self.eval_data, k=self.config.eval_k)
        finally:
            self._module.train()
        name = f"ndcg@{self.config.eval_k}"
        entry = {"step": step, name: result[name]}
        self._evaluations.append(entry)
        logger.info("step %d: held-out %s = %.4f (%d queries)", step, name, result[name], result["queries"])
        return entry

    def train(self, resume: bool | str | Path = False) -> TrainingResult:
        """Run (or resume) training; returns a :class:`TrainingResult`. Writes checkpoints under ``out_dir``.

        ``resume``: False = new run (``out_dir`` must be empty or absent); True = continue from
        the latest complete checkpoint under ``out_dir``; a path = continue from that checkpoint.
        """
        import torch

        cfg = self.config
        resume_from = self._resolve_resume(resume)
        state: dict[str, Any] | None = _read_state_json(resume_from) if resume_from is not None else None
        tensors: dict[str, Any] | None = None
        if resume_from is not None:
            tensors = torch.load(resume_from / STATE_DIR / "state.pt", map_location="cpu", weights_only=True)
            assert state is not None
            if bool(state.get("lora")) != cfg.lora:
                raise DocPCError(
                    f"checkpoint {resume_from} was trained with {'LoRA' if state.get('lora') else 'full fine-tuning'}; "
                    "resume it the same way"
                )

        device, dtype, self._bf16 = self._device_and_dtype()
        torch.manual_seed(cfg.seed)
        failed = self.train_data.prepare(progress=cfg.progress)
        if failed:
            logger.warning("%d training documents could not be rendered and are skipped", len(failed))
        if self.eval_data is not None:
            self.eval_data.prepare(progress=cfg.progress)

        # Model: a resumed full fine-tuning run starts from the checkpoint's weights; LoRA from the base.
        load_from: str | Path = self.base_model
        if resume_from is not None and not cfg.lora:
            load_from = resume_from
        self.encoder = self._load_encoder(load_from, device, dtype)
        self._base_model_id = self.encoder.model_id if resume_from is None or cfg.lora else state.get("base_model_id")
        if state is not None and cfg.lora and state.get("base_model_id") not in (None, self.encoder.model_id):
            raise DocPCError(
                f"checkpoint {resume_from} adapts {state.get('base_model_id')!r}, not {self.encoder.model_id!r}; "
                "pass the same --model"
            )
        self._module = self._prepare_model(self.encoder)
        self._module.train()
        trainable = self._trainable()
        if not trainable:
            raise DocPCError("nothing to train: the model has no trainable parameter")

        sampler = MultiPositiveBatchSampler(
            self.train_data.queries,
            self.train_data.doc_ids,
            queries_per_batch=cfg.batch_size,
            max_docs_per_batch=cfg.max_docs_per_batch,
            negatives_per_batch=cfg.negatives_per_batch,
            seed=cfg.seed,
        )
        epoch_steps = [sampler.steps_per_epoch(e, cfg.gradient_accumulation) for e in range(cfg.epochs)]
        total_steps = sum(epoch_steps)
        if cfg.max_steps is not None:
            total_steps = min(total_steps, cfg.max_steps)
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else int(cfg.warmup_ratio * total_steps)

        decay, no_decay = [], []
        for name, parameter in trainable.items():
            (no_decay if parameter.ndim < 2 or "norm" in name.lower() else decay).append(parameter)
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        self._optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.learning_rate)
        self._scheduler = torch.optim.lr_scheduler.LambdaLR(self._optimizer, self._lr_factor(total_steps, warmup))
        self._loss = cfg.make_loss()
        self._history: list[dict[str, Any]] = []
        self._evaluations: list[dict[str, Any]] = []

        step, epoch, batch_in_epoch = 0, 0, 0
        if resume_from is not None:
            assert state is not None and tensors is not None
            if cfg.lora:
                saved = tensors.get("trainable", {})
                missing = sorted(set(trainable) - set(saved))
                if missing:
                    raise DocPCError(f"checkpoint {resume_from} lacks adapter tensors {missing[:3]} (different LoRA settings?)")
                with torch.no_grad():
                    for name, parameter in trainable.items():
                        parameter.copy_(saved[name].to(parameter.device, dtype=parameter.dtype))
            self._optimizer.load_state_dict(tensors["optimizer"])
            self._scheduler.load_state_dict(tensors["scheduler"])
            # The optimizer holds the lr of the last step taken; recompute it for the next step with this
            # run's schedule (the total may have grown: more epochs or a larger max_steps).
            for group, base_lr, factor in zip(
                self._optimizer.param_groups, self._scheduler.base_lrs, self._scheduler.lr_lambdas
            ):
                group["lr"] = base_lr * factor(self._scheduler.last_epoch)
            self._scheduler._last_lr = [group["lr"] for group in self._optimizer.param_groups]
            self._loss.load_state_dict(state["loss_state"])
            torch.set_rng_state(tensors["torch_rng"])
            if "cuda_rng" in tensors and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(tensors["cuda_rng"])
            step, epoch, batch_in_epoch = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
            saved_config = state.get("config") or {}
            changed = sorted(
                key for key, value in cfg.to_dict().items()
                if key not in _RESUMABLE_CHANGES and key in saved_config and saved_config[key] != value
            )
            if changed:
                logger.warning(
                    "resuming with settings that differ from the checkpoint's: %s (the run is no longer the "
                    "same as an uninterrupted one)", ", ".join(changed),
                )
            self._history = list(state.get("history", []))
            self._evaluations = list(state.get("evaluations", []))
            if self._loss.completed_steps != step:
                raise DocPCError(f"checkpoint {resume_from}: loss schedule at step {self._loss.completed_steps}, trainer at {step}")
            logger.info("resuming from %s at step %d (epoch %d, batch %d)", resume_from, step, epoch, batch_in_epoch)
            if step >= total_steps:
                logger.warning(
                    "nothing left to train: step %d already reaches this run's %d steps (epochs=%d, max_steps=%s); "
                    "raise --epochs or --max-steps to continue",
                    step, total_steps, cfg.epochs, cfg.max_steps,
                )

        if cuda := device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        start_step = step
        bar: Any = None
        if cfg.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total_steps, initial=min(step, total_steps), desc="train", unit="step", file=sys.stderr)
        started = time.perf_counter()
        try:
            while epoch < cfg.epochs and step < total_steps:
                batches = sampler.batches(epoch)
                position = batch_in_epoch
                while position < len(batches) and step < total_steps:
                    group = batches[position : position + cfg.gradient_accumulation]
                    record = self._optimisation_step(group)
                    position += len(group)
                    step += 1
                    record.update(step=step, epoch=epoch)
                    self._history.append(record)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(
                            loss=f"{record['loss']:.4f}",
                            contrastive=f"{record['contrastive']:.4f}",
                            listwise=f"{record['listwise']:.4f}" + ("*" if record["listwise_applied"] else ""),
                        )
                    if step % cfg.log_every == 0 or step == total_steps or record["listwise_applied"]:
                        logger.info(
                            "step %d/%d epoch %d: loss %.4f  contrastive %.4f  listwise %.4f%s  lr %.3g",
                            step, total_steps, epoch, record["loss"], record["contrastive"], record["listwise"],
                            " (applied)" if record["listwise_applied"] else "", record["lr"],
                        )
                    finished_epoch = position >= len(batches)
                    next_epoch, next_position = (epoch + 1, 0) if finished_epoch else (epoch, position)
                    if self.eval_data is not None and cfg.eval_every and step % cfg.eval_every == 0 and step != total_steps:
                        self._evaluate(step)
                    if cfg.save_every and step % cfg.save_every == 0 and step != total_steps:
                        self._write_checkpoint(step, next_epoch, next_position, final=False)
                    epoch, batch_in_epoch = next_epoch, next_position
                    if finished_epoch:
                        break
            if self.eval_data is not None and (not self._evaluations or self._evaluations[-1]["step"] != step):
                self._evaluate(step)
            self._write_checkpoint(step, epoch, batch_in_epoch, final=True)
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - started
        done = step - start_step
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
        if sys.platform == "darwin":
            peak_rss /= 1024.0  # bytes on macOS
        return TrainingResult(
            out_dir=self.out_dir,
            step=step,
            epoch=epoch,
            steps_this_run=done,
            seconds=seconds,
            steps_per_second=done / seconds if seconds > 0 else 0.0,
            peak_rss_mb=peak_rss,
            peak_cuda_mb=torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            history=self._history,
            evaluations=self._evaluations,
            resumed_from=resume_from,
        )

    def _optimisation_step(self, group: Sequence[TrainingBatch]) -> dict[str, Any]:
        """Forward/backward every micro-batch of ``group``, then one optimiser step; returns the log record."""
        import torch

        cfg = self.config
        outputs: list[LossOutput] = []
        for batch in group:
            scores = self.batch_scores(batch)
            device = scores.device
            out = self._loss(scores, batch.relevance.to(device), batch.targets.to(device))
            if not torch.isfinite(out.total):
                raise DocPCError(f"non-finite loss at step {out.step} (queries {', '.join(batch.query_ids[:3])})")
            (out.total / len(group)).backward()
            outputs.append(out)
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(self._trainable().values()), cfg.max_grad_norm)
        lr = self._optimizer.param_groups[0]["lr"]
        self._optimizer.step()
        self._scheduler.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._loss.advance()

        def mean(values: Sequence[torch.Tensor]) -> float:
            return float(sum(float(v.detach()) for v in values) / len(values))

        return {
            "loss": mean([o.total for o in outputs]),
            "contrastive": mean([o.contrastive for o in outputs]),
            "listwise": mean([o.listwise for o in outputs]),
            "listwise_applied": outputs[0].listwise_applied,
            "lr": float(lr),
        }
