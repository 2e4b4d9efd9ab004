"""Writing the corpus: evidence pages, the BEIR files, the manifest and the command line."""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from docpc_retrievers.eval.synthetic.pages import _render_document
from docpc_retrievers.eval.synthetic.planning import (
    _QUERY_TEMPLATES,
    GENERATOR_VERSION,
    SIZES,
    _DocPlan,
    _plan_documents,
)

logger = logging.getLogger(__name__)


def _evidence_pages(plan: _DocPlan) -> dict[str, list[int]]:
    """Topic id -> 1-based pages whose text layer holds its phrase (evidence, tables, figures)."""
    out: dict[str, list[int]] = {t: [] for t in plan.topics}
    for number, page in enumerate(plan.pages, 1):
        for topic in page.evidence:
            out[topic.topic_id].append(number)
        if page.topic is not None:
            out[page.topic.topic_id].append(number)
    return {t: sorted(set(p)) for t, p in out.items()}


# ------------------------------------------------------------------------------------ writing


@dataclass(frozen=True)
class SyntheticSummary:
    """What :func:`generate_corpus` wrote."""

    root: Path
    size: str
    seed: int
    documents: int
    pages: int
    queries: dict[str, int]
    long_documents: int
    deep_placements: int

    def to_dict(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "size": self.size,
            "seed": self.seed,
            "documents": self.documents,
            "pages": self.pages,
            "queries": dict(self.queries),
            "long_documents": self.long_documents,
            "deep_placements": self.deep_placements,
        }


def generate_corpus(out: str | Path, size: str = "tiny", *, seed: int = 0, overwrite: bool = False) -> SyntheticSummary:
    """Write a synthetic labelled corpus in the BEIR layout into ``out``; same size and seed, same bytes.

    Refuses a non-empty ``out`` unless ``overwrite`` (then the folder's generated
    parts are replaced).
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    spec = SIZES[size]
    root = Path(out).expanduser().resolve()
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{root} is not empty (pass overwrite=True / --overwrite to replace it)")
        for name in ("pdfs", "qrels"):
            shutil.rmtree(root / name, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    docs, topics = _plan_documents(seed, spec)
    corpus_lines: list[str] = []
    for plan in docs:
        rel = Path("pdfs") / plan.domain / f"{plan.doc_id}.pdf"
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_render_document(plan, seed))
        record = {
            "_id": plan.doc_id,
            "title": plan.title,
            "file": rel.as_posix(),
            "metadata": {
                "domain": plan.domain,
                "pages": plan.n_pages,
                "topics": dict(sorted(plan.topics.items())),
                "evidence_pages": _evidence_pages(plan),
                "deep_topics": plan.deep,
            },
        }
        corpus_lines.append(json.dumps(record, sort_keys=True))
    (root / "corpus.jsonl").write_text("\n".join(corpus_lines) + "\n", encoding="utf-8")

    query_lines: list[str] = []
    (root / "qrels").mkdir(exist_ok=True)
    counts: dict[str, int] = {}
    for split, templates in _QUERY_TEMPLATES.items():
        rows = ["query-id\tcorpus-id\tscore"]
        rng = random.Random(f"docpc-synthetic-queries:{seed}:{split}")
        for topic in topics:
            qid = f"{split}-{topic.topic_id}"
            text = topic.fill(rng.choice(templates), rng)
            query_lines.append(
                json.dumps(
                    {
                        "_id": qid,
                        "text": text,
                        "domain": topic.domain,
                        "metadata": {"topic": topic.topic_id, "phrase": topic.phrase, "split": split},
                    },
                    sort_keys=True,
                )
            )
            for plan in docs:
                if topic.topic_id in plan.topics:
                    rows.append(f"{qid}\t{plan.doc_id}\t{plan.topics[topic.topic_id]}")
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        counts[split] = len(topics)
    (root / "queries.jsonl").write_text("\n".join(query_lines) + "\n", encoding="utf-8")

    summary = SyntheticSummary(
        root=root,
        size=size,
        seed=seed,
        documents=len(docs),
        pages=sum(d.n_pages for d in docs),
        queries=counts,
        long_documents=sum(1 for d in docs if d.n_pages >= 20),
        deep_placements=sum(len(d.deep) for d in docs),
    )
    manifest = {"generator": "docpc_retrievers.eval.synthetic", "version": GENERATOR_VERSION, **summary.to_dict()}
    manifest.pop("root")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    logger.info("wrote %d documents (%d pages) and %s queries to %s", summary.documents, summary.pages, counts, root)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m docpc_retrievers.eval.synthetic OUT --size tiny|small [--seed N] [--overwrite]``."""
    parser = argparse.ArgumentParser(
        prog="python -m docpc_retrievers.eval.synthetic",
        description="Write a deterministic DocViRe-style labelled PDF corpus (BEIR layout).",
    )
    parser.add_argument("out", type=Path, help="output folder (must be empty unless --overwrite)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="tiny (24 docs) or small (280 docs)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing corpus in OUT")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        summary = generate_corpus(args.out, args.size, seed=args.seed, overwrite=args.overwrite)
    except FileExistsError as exc:
        parser.error(str(exc))
    print(json.dumps(summary.to_dict(), indent=2))
    return 0
