"""Build a tiny random ColQwen2 (or ColPali) checkpoint (model + processor) for tests and examples.

Why: tests, example tests and benchmarks must exercise the real
``ColQwen2.from_pretrained`` / ``ColQwen2Processor.from_pretrained`` loading
path without network access or real weights. The checkpoint built here has
random weights, so its scores are meaningless; it is only good for shapes,
plumbing, determinism and ranking logic. It builds in about a second.

Run as a script: ``python -m docpc_retrievers.testing.tiny_checkpoint OUT_DIR``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import Qwen2TokenizerFast

__all__ = ["TINY_SPECIAL_TOKENS", "build_tiny_colpali", "build_tiny_colqwen2", "main"]

logger = logging.getLogger(__name__)

#: Special tokens the Qwen2-VL prompt templates of colpali-engine rely on.
TINY_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

_TRAINING_SENTENCES: tuple[str, ...] = (
    "Describe the image.",
    "user assistant system",
    "What is the total revenue reported in the annual financial statement?",
    "Quarterly report: revenue, profit, margin, growth and outlook for 2024.",
    "The quick brown fox jumps over the lazy dog 0123456789.",
    "Invoice number, date, amount due, payment terms and contact details.",
    "Figure 3 shows the architecture of the proposed retrieval model.",
    "Table 1: results on the benchmark, recall at 1, 5 and 10.",
    "Where is the warranty information in the user manual?",
    "Safety instructions, installation guide, troubleshooting and index.",
)

_VOCAB_SIZE = 400


def _byte_level_bpe(special_tokens: Sequence[str]) -> Any:
    """A byte-level BPE (vocab ~400) trained on a few sentences, with ``special_tokens`` first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(_TRAINING_SENTENCES), trainer=trainer)
    return bpe


def _build_tokenizer() -> Qwen2TokenizerFast:
    """The tiny BPE wrapped in ``Qwen2TokenizerFast``."""
    from transformers import Qwen2TokenizerFast

    bpe = _byte_level_bpe(TINY_SPECIAL_TOKENS)
    return Qwen2TokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
    )


#: The architecture behind ``vidore/colqwen2-v1.0`` (Qwen2-VL-2B's published config), for
#: benchmarks that need realistic compute per image with random weights. The vocabulary is
#: the tiny tokenizer's: embeddings are look-ups and ColQwen2 has no LM head, so the
#: compute per token is the real model's.
_PATCHES = dict(patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
QWEN2_VL_2B_TEXT = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                        num_key_value_heads=2, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})
QWEN2_VL_2B_VISION = dict(depth=32, embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4, **_PATCHES)
_TINY_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
_TINY_VISION = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, **_PATCHES)


def build_tiny_colqwen2(
    path: str | Path,
    *,
    seed: int = 0,
    architecture: str = "tiny",
    max_visual_tokens: int = 64,
    dtype: str = "float32",
    device: str | None = None,
) -> Path:
    """Save a random ColQwen2 model and its ColQwen2Processor into ``path``.

    The folder is created if needed and loads with
    ``ColQwen2.from_pretrained(path)`` / ``ColQwen2Processor.from_pretrained(path)``.
    Output embeddings have dim 128. The same ``seed`` gives the same weights.
    ``architecture="qwen2-vl-2b"`` builds the real ColQwen2 size (about 2 B
    parameters, random weights; save it with ``dtype="bfloat16"``) for
    throughput benchmarks; ``max_visual_tokens`` caps visual tokens per image
    (ColQwen2 was trained with about 768). ``device="cuda"`` draws the weights there in ``dtype`` (seconds
    instead of about 40 on a CPU for the 2 B model; other values than the CPU's for the same seed). Returns the
    folder as a ``Path``.
    """
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    from docpc_retrievers.encoders import import_colpali_models

    ce_models = import_colpali_models()
    ColQwen2, ColQwen2Processor = ce_models.ColQwen2, ce_models.ColQwen2Processor  # noqa: N806

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _build_tokenizer()
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in TINY_SPECIAL_TOKENS}

    if architecture not in ("tiny", "qwen2-vl-2b"):
        raise ValueError(f"architecture must be 'tiny' or 'qwen2-vl-2b', got {architecture!r}")
    big = architecture == "qwen2-vl-2b"
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            **(QWEN2_VL_2B_TEXT if big else _TINY_TEXT),
            # Qwen2's defaults (151643, ...) lie outside the tiny vocab and make transformers warn.
            bos_token_id=None,
            eos_token_id=ids["<|endoftext|>"],
            pad_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(QWEN2_VL_2B_VISION if big else _TINY_VISION),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )

    # Seed and restore the global RNG so callers' randomness is not disturbed.
    on = torch.device(device or "cpu")
    with torch.random.fork_rng(devices=[] if on.type == "cpu" else None, device_type=on.type), on:
        torch.manual_seed(seed)
        model = ColQwen2(config)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    model.eval()

    processor = ColQwen2Processor(
        image_processor=Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=28 * 28 * max_visual_tokens),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
    )

    model.save_pretrained(out)
    processor.save_pretrained(out)
    logger.info("%s ColQwen2 checkpoint (seed=%d) written to %s", architecture, seed, out)
    return out


#: PaliGemma's special tokens (its processor adds ``<image>`` and the location/segmentation tokens itself).
_PALIGEMMA_SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
TINY_COLPALI_IMAGE_SIZE = 56
"""Side of the tiny ColPali's square input image: 56 / 14 = a 4 x 4 grid of visual tokens (the real one: 448 px, 32 x
32)."""
_PATCH = 14


def build_tiny_colpali(path: str | Path, *, seed: int = 0) -> Path:
    """Save a random ColPali (PaliGemma: SigLIP vision, Gemma text) and its ColPaliProcessor into ``path``.

    Like :func:`build_tiny_colqwen2`, for the fixed-resolution family: every image is resized to a 56 px square and
    becomes one 4 x 4 block of visual tokens ahead of the prompt's. Output embeddings have dim 128; the same ``seed``
    gives the same weights. Returns the folder.
    """
    import torch
    from transformers import GemmaTokenizerFast, PaliGemmaConfig, SiglipImageProcessor

    from docpc_retrievers.encoders import import_colpali_models

    ce_models = import_colpali_models()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = GemmaTokenizerFast(
        tokenizer_object=_byte_level_bpe(_PALIGEMMA_SPECIAL_TOKENS),
        pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
    )
    side = TINY_COLPALI_IMAGE_SIZE // _PATCH
    image_processor = SiglipImageProcessor(
        size={"height": TINY_COLPALI_IMAGE_SIZE, "width": TINY_COLPALI_IMAGE_SIZE},
        image_mean=[0.5] * 3, image_std=[0.5] * 3, image_seq_length=side * side,
    )
    processor = ce_models.ColPaliProcessor(image_processor=image_processor, tokenizer=tokenizer)  # adds <image>
    config = PaliGemmaConfig(
        text_config=dict(
            model_type="gemma", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(
            model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, image_size=TINY_COLPALI_IMAGE_SIZE, patch_size=_PATCH, projection_dim=64,
        ),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"), projection_dim=64, hidden_size=64,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ce_models.ColPali(config)
    model.eval()
    model.save_pretrained(out)
    processor.save_pretrained(out)
    logger.info("tiny ColPali checkpoint (seed=%d) written to %s", seed, out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: build the checkpoint into OUT_DIR."""
    parser = argparse.ArgumentParser(
        prog="python -m docpc_retrievers.testing.tiny_checkpoint",
        description="Build a tiny random ColQwen2 or ColPali checkpoint (for tests only; scores are meaningless).",
    )
    parser.add_argument("out_dir", type=Path, help="folder to write the checkpoint into")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the weights (default 0)")
    parser.add_argument("--family", choices=("colqwen2", "colpali"), default="colqwen2", help="which family")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    (build_tiny_colpali if args.family == "colpali" else build_tiny_colqwen2)(args.out_dir, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
