"""Checkpoints on disk: find the newest complete one, write one atomically, prune old ones, resolve a resume.

A checkpoint is an ordinary colpali-engine model folder (LoRA weights merged) plus
``trainer_state/`` (``state.json`` and ``state.pt``: what a resume needs) and
``docpc_training.json`` (provenance). :class:`CheckpointMixin` holds the trainer's
saving and resuming; :class:`~docpc_retrievers.training.trainer.Trainer` mixes it in.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docpc_retrievers import __version__
from docpc_retrievers.errors import DocPCError

if TYPE_CHECKING:
    from docpc_retrievers.encoders import ColPaliEncoder
    from docpc_retrievers.training.config import TrainingConfig

__all__ = ["CHECKPOINT_PREFIX", "GRID_CACHE", "STATE_DIR", "TRAINING_INFO_FILE", "CheckpointMixin",
           "find_resume_checkpoint", "read_state_json"]

logger = logging.getLogger(__name__)

#: Sub-folder of a checkpoint holding the resume state.
STATE_DIR = "trainer_state"
#: Provenance file written next to the weights of every checkpoint.
TRAINING_INFO_FILE = "docpc_training.json"
#: Intermediate checkpoints are ``OUT/checkpoint-<step>``.
CHECKPOINT_PREFIX = "checkpoint-"
_STATE_FORMAT = 1
#: Sub-folder of ``OUT`` holding the rendered training grids (not part of any checkpoint).
GRID_CACHE = "grid-cache"


def read_state_json(folder: Path) -> dict[str, Any] | None:
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
        state = read_state_json(folder)
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


class CheckpointMixin:
    """Saving and resuming for :class:`~docpc_retrievers.training.trainer.Trainer` (it sets these attributes)."""

    config: TrainingConfig
    out_dir: Path
    base_model: str
    encoder: ColPaliEncoder | None
    _module: Any
    _optimizer: Any
    _scheduler: Any
    _loss: Any
    _history: list[dict[str, Any]]
    _evaluations: list[dict[str, Any]]
    _base_model_id: Any
    _original_longest_edge: Any

    def _trainable(self) -> dict[str, Any]:
        raise NotImplementedError

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
                p.name for p in self.out_dir.iterdir() if p.name != GRID_CACHE and not p.name.startswith(".saving-")
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
        if read_state_json(folder) is None:
            raise DocPCError(f"{folder} is not a training checkpoint (no {STATE_DIR}/state.json)")
        return folder
