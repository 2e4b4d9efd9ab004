"""``docpc eval``: run retrieval systems over a labelled corpus and write the quality and efficiency tables.

Needs the ``[eval]`` extra (``pip install "docpc-retrievers[eval]"``)::

    docpc eval DATASET --model ID|PATH --systems SPEC... [--k 5,10] [--out DIR] [--split test]

Exit codes: 0 success; 2 usage errors (bad or unsupported system spec, missing
``--model`` for a visual system); 3 some documents could not be indexed (the
rest were evaluated); 1 fatal errors (bad labels, model that cannot load, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from docpc_retrievers.cli.common import EXIT_FATAL, EXIT_OK, EXIT_PARTIAL, UsageError, encoder_options, positive_int

__all__ = ["register", "run"]


def _ks(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated cut-offs such as 5,10, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"cut-offs must be integers >= 1, got {text!r}")
    return tuple(dict.fromkeys(values))


def register(subparsers: Any) -> None:
    """Add the ``eval`` sub-command."""
    from docpc_retrievers.eval.metrics import METRICS

    p = subparsers.add_parser(
        "eval",
        help="evaluate retrieval systems on a labelled corpus (quality, efficiency, per-query outcomes)",
        description=(
            "Run each system over the same PDFs and queries and write report.md and report.json. "
            "Systems: grid:STRATEGY:K[:RxC], page:all[:max|mean|sum], page:STRATEGY:K[:AGG], "
            "rerank:STRATEGY:K[:TOPN], bm25:all, bm25:selected:STRATEGY:K, random[:SEED]."
        ),
    )
    p.add_argument("dataset", type=Path, help="labelled corpus folder (BEIR layout or simple JSONL form)")
    p.add_argument("--systems", nargs="+", required=True, metavar="SPEC", help="systems to compare (first two: per-query breakdown)")
    p.add_argument("--model", help="checkpoint id or local path (needed by grid/page/rerank systems)")
    p.add_argument("--k", type=_ks, default=(5, 10), help="cut-offs, first one for the quality table (default 5,10)")
    p.add_argument("--metric", choices=METRICS, default="ndcg", help="quality-table metric (default ndcg)")
    p.add_argument("--out", type=Path, help="output folder (default docpc-eval/<dataset name>)")
    p.add_argument("--split", default="test", help="qrels split (default test)")
    p.add_argument("--device", help="cuda, mps or cpu (default: best available)")
    p.add_argument("--batch-size", type=positive_int, default=4, help="images per encoder batch")
    p.add_argument("--max-visual-tokens", type=positive_int, help="visual tokens per image (Qwen models)")
    p.add_argument("--json", action="store_true", help="print report.json instead of the Markdown")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``docpc eval``; returns the exit code."""
    try:
        import rank_bm25  # noqa: F401 - only to tell a core-only install what to add
    except ImportError:
        print('docpc: eval needs the [eval] extra: pip install "docpc-retrievers[eval]"', file=sys.stderr)
        return EXIT_FATAL
    from docpc_retrievers.eval import SystemSpecError, parse_system, run_evaluation
    from docpc_retrievers.eval.corpus import load_labelled_corpus

    try:
        specs = [parse_system(s) for s in args.systems]
    except SystemSpecError as exc:
        raise UsageError(str(exc)) from None
    if len({s.text for s in specs}) != len(specs):
        raise UsageError("the same system is listed twice in --systems")
    if any(s.visual for s in specs) and not args.model:
        raise UsageError("grid, page and rerank systems need --model ID|PATH")
    if not args.dataset.is_dir():
        raise UsageError(f"{args.dataset} is not a folder")
    corpus = load_labelled_corpus(args.dataset, split=args.split)
    out = args.out or Path("docpc-eval") / args.dataset.resolve().name
    kwargs = encoder_options(args)
    report = run_evaluation(
        corpus,
        specs,
        out_dir=out,
        model=args.model,
        encoder_kwargs=kwargs,
        ks=args.k,
        metric=args.metric,
        split=args.split,
    )
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report.to_markdown())
        print(f"\nwritten: {out / 'report.md'}, {out / 'report.json'}")
    failed = any(r.stats.failures for r in report.systems)
    return EXIT_PARTIAL if failed else EXIT_OK
