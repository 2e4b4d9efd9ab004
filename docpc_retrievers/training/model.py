"""The model side of training: device and dtype, loading, LoRA or full fine-tuning, and the forward pass to scores.

:class:`ModelMixin` holds these steps for :class:`~docpc_retrievers.training.trainer.Trainer`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import DocPCError
from docpc_retrievers.training.config import TrainingConfig
from docpc_retrievers.training.data import TrainingBatch
from docpc_retrievers.training.losses import maxsim_scores

if TYPE_CHECKING:
    pass

__all__ = ["ModelMixin", "right_padding"]

logger = logging.getLogger(__name__)


@contextmanager
def right_padding(processor: Any) -> Iterator[None]:
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


class ModelMixin:
    """Device, model loading and preparation, and batch scores for the trainer (it sets these attributes)."""

    config: TrainingConfig
    base_model: str
    encoder: ColPaliEncoder | None
    encoder_kwargs: dict[str, Any]
    _module: Any

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
            if encoder.max_num_visual_tokens is None:  # only dynamic-resolution families have a cap
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
        with right_padding(processor):
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
