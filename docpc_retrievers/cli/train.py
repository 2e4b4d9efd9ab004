"""``docpc train``: fine-tune a ColPali-family checkpoint on a labelled PDF collection.

Registered by :mod:`docpc_retrievers.cli.app`.
The checkpoint written to ``--out`` loads with ``docpc index --model OUT`` and
``ColPaliEncoder(OUT)``. Heavy imports (torch, colpali-engine) happen only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_OK,
    UsageError,
    non_negative_float,
    non_negative_int,
    pair_arg,
    positive_float,
    positive_int,
)

__all__ = ["register", "run"]

logger = logging.getLogger("docpc_retrievers.cli.train")

_LOSSES = ("combined", "mp-infonce", "infonce", "listwise")


def _grid(text: str) -> tuple[int, int]:
    return pair_arg(text, "ROWSxCOLS such as 2x2")


def _cell(text: str) -> tuple[int, int]:
    return pair_arg(text, "WIDTHxHEIGHT such as 512x662")


def register(subparsers: Any) -> None:
    """Add the ``train`` sub-command to ``docpc``."""
    from docpc_retrievers.documents.selection import STRATEGIES

    p = subparsers.add_parser(
        "train",
        help="fine-tune a model on labelled PDFs (multi-positive InfoNCE + ApproxNDCG)",
        description=(
            "Fine-tune a ColPali-family checkpoint on grids of labelled PDFs. DATA is a labelled corpus "
            "folder (BEIR layout or queries.jsonl + pdfs/). OUT receives a checkpoint that "
            "`docpc index --model OUT` loads."
        ),
    )
    p.add_argument("data", type=Path, metavar="DATA", help="labelled corpus folder for training")
    p.add_argument("--model", required=True, help="base checkpoint (hub id or local folder)")
    p.add_argument("--out", required=True, type=Path, help="output folder for checkpoints")
    p.add_argument("--split", default="train", help="split of DATA to train on (default train)")
    p.add_argument("--eval-data", type=Path, help="held-out labelled corpus for NDCG@5 during training")
    p.add_argument("--eval-split", default="test", help="split of --eval-data (default test)")
    p.add_argument("--eval-every", type=positive_int, help="evaluate every N steps (and at the end)")
    g = p.add_argument_group("loss")
    g.add_argument("--loss", choices=_LOSSES, default="combined", help="loss variant (default combined)")
    g.add_argument("--listwise-every", type=positive_int, default=40, help="m: listwise term at steps m, 2m, ... (default 40)")
    g.add_argument("--lambda", dest="listwise_weight", type=non_negative_float, default=1.0, help="weight of the listwise term (default 1.0)")
    g.add_argument("--temperature", type=positive_float, default=0.02, help="InfoNCE temperature tau (default 0.02)")
    g.add_argument("--listwise-k", type=positive_int, default=5, help="K of ApproxNDCG@K (default 5)")
    g.add_argument("--listwise-alpha", type=positive_float, default=0.1, help="ApproxNDCG sigmoid temperature (default 0.1)")
    g = p.add_argument_group("grids")
    g.add_argument("--strategy", choices=STRATEGIES, default="first", help="page selection (default first)")
    g.add_argument("--pages", type=positive_int, default=4, help="K pages per grid (default 4)")
    g.add_argument("--grid", type=_grid, help="grid shape ROWSxCOLS (default: from --pages)")
    g.add_argument("--cell-size", type=_cell, help="cell size WIDTHxHEIGHT in pixels (default 512x662)")
    g.add_argument("--max-visual-tokens", type=positive_int, help="visual tokens per grid (Qwen models)")
    g = p.add_argument_group("model and optimisation")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--lora", dest="lora", action="store_true", default=True, help="train LoRA adapters (default)")
    mode.add_argument("--full", dest="lora", action="store_false", help="full fine-tuning")
    g.add_argument("--lora-rank", type=positive_int, default=32, help="LoRA rank (default 32)")
    g.add_argument("--epochs", type=positive_int, default=1, help="epochs (default 1)")
    g.add_argument("--max-steps", type=positive_int, help="stop after this many optimisation steps")
    g.add_argument("--batch-size", type=positive_int, default=8, help="queries per micro-batch (default 8)")
    g.add_argument("--max-docs-per-batch", type=positive_int, help="cap on documents per micro-batch")
    g.add_argument("--negatives", type=non_negative_int, default=0, help="extra random negatives per batch")
    g.add_argument("--grad-accum", type=positive_int, default=1, help="micro-batches per optimisation step")
    g.add_argument("--lr", type=positive_float, default=2e-4, help="peak learning rate (default 2e-4)")
    g.add_argument("--weight-decay", type=non_negative_float, default=0.0, help="AdamW weight decay (default 0)")
    g.add_argument("--warmup-steps", type=non_negative_int, help="linear warm-up steps (default 5%% of all steps)")
    g.add_argument("--gradient-checkpointing", action="store_true", help="trade compute for memory")
    g.add_argument("--no-bf16", action="store_true", help="no bf16 autocast on CUDA")
    g.add_argument("--device", help="cuda, mps or cpu (default: best available)")
    g.add_argument("--threads", type=positive_int, help="torch CPU threads (1 is often fastest for tiny models)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g = p.add_argument_group("run")
    g.add_argument("--save-every", type=positive_int, help="also write OUT/checkpoint-<step> every N steps")
    g.add_argument("--resume", action="store_true", help="continue the run in OUT from its latest checkpoint")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    g = p.add_argument_group("ablation")
    g.add_argument(
        "--ablation", action="store_true",
        help="instead of one run, train InfoNCE, MP-InfoNCE, listwise alone and the combined loss at each "
        "--ablation-every m, each over --seeds seeds, and score them on --eval-data (needed): mean, spread and "
        "paired verdicts in OUT/ablation.json and OUT/ablation.md",
    )
    g.add_argument("--seeds", type=positive_int, default=5, help="seeds per loss in an ablation (default 5: --seed on)")
    g.add_argument("--ablation-every", type=_every, default=(2, 10, 40),
                   help="m values of the combined arms, comma-separated (default 2,10,40)")
    p.set_defaults(func=run)


def _every(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    """Run ``docpc train``; returns the exit code (0 on success)."""
    from docpc_retrievers.eval.corpus import load_labelled_corpus
    from docpc_retrievers.config import GridSpec
    from docpc_retrievers.training.trainer import Trainer, TrainingConfig

    if not args.data.is_dir():
        raise UsageError(f"DATA {str(args.data)!r} is not a folder")
    if args.eval_data is not None and not args.eval_data.is_dir():
        raise UsageError(f"--eval-data {str(args.eval_data)!r} is not a folder")
    if args.eval_every is not None and args.eval_data is None:
        raise UsageError("--eval-every needs --eval-data")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {str(args.out)!r} is a file")
    if args.ablation and (args.eval_data is None or args.resume):
        raise UsageError("--ablation needs --eval-data (its runs are scored there) and cannot --resume")
    try:
        grid_kwargs: dict[str, Any] = {"strategy": args.strategy, "pages": args.pages, "grid": args.grid, "seed": args.seed}
        if args.cell_size is not None:
            grid_kwargs["cell_size"] = args.cell_size
        config = TrainingConfig(
            loss=args.loss,
            temperature=args.temperature,
            listwise_every=args.listwise_every,
            listwise_weight=args.listwise_weight,
            listwise_k=args.listwise_k,
            listwise_alpha=args.listwise_alpha,
            grid=GridSpec(**grid_kwargs),
            max_num_visual_tokens=args.max_visual_tokens,
            batch_size=args.batch_size,
            max_docs_per_batch=args.max_docs_per_batch,
            negatives_per_batch=args.negatives,
            lora=args.lora,
            lora_rank=args.lora_rank,
            lora_alpha=float(args.lora_rank),
            epochs=args.epochs,
            max_steps=args.max_steps,
            gradient_accumulation=args.grad_accum,
            learning_rate=args.lr,
            weight_decay=args.weight_decay,
            warmup_steps=args.warmup_steps,
            gradient_checkpointing=args.gradient_checkpointing,
            bf16=False if args.no_bf16 else None,
            device=args.device,
            seed=args.seed,
            save_every=args.save_every,
            eval_every=args.eval_every,
            progress=not args.no_progress,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    train = load_labelled_corpus(args.data, split=args.split)
    held_out = load_labelled_corpus(args.eval_data, split=args.eval_split) if args.eval_data is not None else None
    if args.ablation:
        return _ablation(args, config, train, held_out)
    trainer = Trainer(args.model, train, args.out, config, eval_data=held_out)
    try:
        result = trainer.train(resume=bool(args.resume))
    except ValueError as exc:  # settings that only turn out wrong once the model is loaded
        raise UsageError(str(exc)) from None
    if args.json:
        data = result.to_dict()
        data["history"] = data["history"][-20:]
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        last = result.history[-1] if result.history else None
        print(
            f"trained to step {result.step} ({result.steps_this_run} steps this run, "
            f"{result.steps_per_second:.2f} steps/s); checkpoint: {result.out_dir}"
        )
        if last is not None:
            print(f"last step: loss {last['loss']:.4f}, contrastive {last['contrastive']:.4f}, listwise {last['listwise']:.4f}")
        for entry in result.evaluations[-1:]:
            metric = next(k for k in entry if k != "step")
            print(f"held-out {metric} at step {entry['step']}: {entry[metric]:.4f}")
        print(f"use it: docpc index PDFS --store STORE --model {result.out_dir}")
    return EXIT_OK


def _ablation(args: argparse.Namespace, config: Any, train: Any, held_out: Any) -> int:
    """``docpc train --ablation``: every arm over ``--seeds`` seeds from ``--model``; the report in OUT."""
    from docpc_retrievers.training.ablation import default_arms, run_ablation
    from docpc_retrievers.training.data import GridDataset

    out: Path = args.out
    if out.is_dir() and any(p.name != "grid-cache" for p in out.iterdir()):
        raise UsageError(f"--out {str(out)!r} already holds files; an ablation writes into an empty folder")
    cache = out / "grid-cache"
    train_grids, held_grids = GridDataset(train, config.grid, cache_dir=cache), GridDataset(held_out, config.grid, cache_dir=cache)
    train_grids.prepare()
    held_grids.prepare()

    def progress(row: dict[str, Any]) -> None:
        if not args.json:
            print(f"{row['arm']:<16} seed {row['seed']}: NDCG@5 {row['ndcg@5']:.4f}, recall@10 {row['recall@10']:.4f}",
                  flush=True)

    report = run_ablation(lambda seed: args.model, train_grids, held_grids, config,
                          arms=default_arms(args.ablation_every), seeds=[args.seed + i for i in range(args.seeds)],
                          work_dir=out / "runs", on_run=progress)
    (out / "ablation.json").write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    (out / "ablation.md").write_text(report.to_markdown(), encoding="utf-8")
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print()
        print(report.to_markdown(), end="")
        print(f"written: {out / 'ablation.json'}, {out / 'ablation.md'}")
    return EXIT_OK
