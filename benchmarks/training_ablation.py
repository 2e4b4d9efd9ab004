"""The co-relevance experiment of docs/training.md: six arms x five seeds on the tiny random ColQwen2.

Builds the pre-registered task (``testing.topic_corpus.corelevance_corpus``: train
corpus seed 0 with the training phrasings, held-out corpus seed 1 with the held-out
ones), a tiny checkpoint per seed, and trains InfoNCE, MP-InfoNCE, listwise alone and
the combined loss at m = 2, 10, 40 with the learning test's settings (full
fine-tuning, one batch of all 18 queries with their 24 positives and the 12 decoys,
120 steps, lr 1e-3 with 5 warm-up steps then linear decay, temperature 0.05, one
torch thread). Prints each run as it ends, then the table and the paired
comparisons the design names; ``--out`` also writes ``ablation.json`` and
``ablation.md``. About 20 s a run on one core.

    .venv/bin/python benchmarks/training_ablation.py --out /tmp/ablation
    .venv/bin/python benchmarks/training_ablation.py --seeds 0,1 --every 10   # a quick look
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--every", default="2,10,40", help="m values of the combined arms")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--out", type=Path, help="folder for ablation.json and ablation.md")
    args = parser.parse_args()

    import torch

    from docpc_retrievers.encoders import ColPaliEncoder
    from docpc_retrievers.eval.corpus import load_labelled_corpus
    from docpc_retrievers.testing import build_tiny_colqwen2
    from docpc_retrievers.testing.topic_corpus import HELD_OUT_TEMPLATES, corelevance_corpus
    from docpc_retrievers.training import GridDataset, GridSpec, TrainingConfig
    from docpc_retrievers.training.ablation import default_arms, run_ablation
    from docpc_retrievers.training.evaluation import evaluate_ndcg

    torch.set_num_threads(1)
    spec = GridSpec(pages=4, cell_size=(56, 56))  # 112x112 grids, as the learning test
    with tempfile.TemporaryDirectory(prefix="docpc-ablation-") as tmp:
        work = Path(tmp)
        train = GridDataset(load_labelled_corpus(corelevance_corpus(work / "train", seed=0).root), spec)
        held_out = GridDataset(load_labelled_corpus(
            corelevance_corpus(work / "held_out", seed=1, templates=HELD_OUT_TEMPLATES).root), spec)
        train.prepare()
        held_out.prepare()
        base = TrainingConfig(grid=spec, batch_size=18, negatives_per_batch=12, lora=False, learning_rate=1e-3,
                              warmup_steps=5, lr_schedule="linear", temperature=0.05, max_grad_norm=None,
                              epochs=args.steps, progress=False, device="cpu")
        checkpoints: dict[int, Path] = {}

        def model_for_seed(seed: int) -> Path:
            if seed not in checkpoints:
                checkpoints[seed] = build_tiny_colqwen2(work / f"tiny-{seed}", seed=seed)
            return checkpoints[seed]

        def show(row: dict[str, object]) -> None:
            print(f"{row['arm']:<16} seed {row['seed']}: NDCG@5 {row['ndcg@5']:.3f}  recall@10 {row['recall@10']:.3f}"
                  f"  ({row['seconds']:.0f} s)", flush=True)

        print(f"train: {len(train.queries)} queries, {len(train.doc_ids)} documents; "
              f"held-out: {len(held_out.queries)} queries, {len(held_out.doc_ids)} documents", flush=True)
        seeds = [int(s) for s in args.seeds.split(",")]
        for seed in seeds:  # the starting point of every arm's seed
            scored = evaluate_ndcg(ColPaliEncoder(model_for_seed(seed), device="cpu", dtype="float32"), held_out)
            print(f"{'untrained':<16} seed {seed}: NDCG@5 {scored['ndcg@5']:.3f}  recall@10 {scored['recall@10']:.3f}",
                  flush=True)
        report = run_ablation(model_for_seed, train, held_out, base,
                              arms=default_arms([int(m) for m in args.every.split(",")]),
                              seeds=seeds, work_dir=work / "runs", on_run=show)
    print()
    print(report.to_markdown())
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ablation.json").write_text(json.dumps(report.to_dict(), indent=1))
        (args.out / "ablation.md").write_text(report.to_markdown())


if __name__ == "__main__":
    main()
