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

Its parts: :mod:`.config` (what a run is asked to do), :mod:`.checkpoints` (discover, save,
prune, resume state), :mod:`.schedule` (learning rate), :mod:`.evaluation` (held-out NDCG);
this module holds the model preparation and the training loop.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import DocPCError
from docpc_retrievers.training.checkpoints import (
    CHECKPOINT_PREFIX,
    GRID_CACHE,
    STATE_DIR,
    TRAINING_INFO_FILE,
    CheckpointMixin,
    find_resume_checkpoint,
    read_state_json,
)
from docpc_retrievers.training.config import (
    DEFAULT_LORA_TARGET_MODULES,
    RESUMABLE_CHANGES,
    TrainingConfig,
    TrainingResult,
)
from docpc_retrievers.training.data import (
    GridDataset,
    LabelledCorpusLike,
    MultiPositiveBatchSampler,
    TrainingBatch,
)
from docpc_retrievers.training.evaluation import evaluate_ndcg
from docpc_retrievers.training.losses import LossOutput
from docpc_retrievers.training.model import ModelMixin
from docpc_retrievers.training.schedule import lr_factor

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


class Trainer(ModelMixin, CheckpointMixin):
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
            cache: Path | None = self.out_dir / GRID_CACHE
        elif cache_dir is False:
            cache = None
        elif cache_dir is True:
            cache = self.out_dir / GRID_CACHE
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
        state: dict[str, Any] | None = read_state_json(resume_from) if resume_from is not None else None
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
        self._scheduler = torch.optim.lr_scheduler.LambdaLR(self._optimizer, lr_factor(self.config.lr_schedule, total_steps, warmup))
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
                if key not in RESUMABLE_CHANGES and key in saved_config and saved_config[key] != value
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

