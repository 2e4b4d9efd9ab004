"""A smoke test any Python the package declares can run without pytest: every public module imports, three PDFs
are indexed with the tiny random checkpoint, searched, and retrieved through both framework retrievers.

    python -m docpc_retrievers.testing.smoke

It prints one line per step and exits 1 at the first failure (the suite runs it under the oldest and newest
declared Pythons set up beside the main environment: tests/test_smoke_pythons.py).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

_OPTIONAL = ("docpc_retrievers.serve", "docpc_retrievers.eval", "docpc_retrievers.training", "docpc_retrievers.testing")
"""Subpackages behind extras (serve, eval) or the dev tools (pytest for testing's fixtures): a third-party module
missing there is an extra not installed, not a failure."""


def _public_modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    return [package] + [m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")
                        if not any(part.startswith("_") for part in m.name.split(".")[1:])]


def _pdfs(folder: Path) -> list[Path]:
    import pymupdf

    paths = []
    for i, words in enumerate(["quarterly revenue by region", "training a retrieval model", "a recipe for bread"]):
        doc = pymupdf.open()
        for p in range(i + 1):
            doc.new_page(width=300, height=400).insert_text((30, 60), f"{words}, page {p + 1}", fontsize=14)
        doc.set_metadata({"title": words})
        paths.append(folder / f"smoke-{i}.pdf")
        doc.save(paths[-1])
        doc.close()
    return paths


def main() -> int:
    step = "start"
    try:
        step = "import every public module"
        names = [*_public_modules("docpc_retrievers"), *_public_modules("langchain_docpc"),
                 *_public_modules("llama_index.retrievers.docpc")]
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                if name.startswith(_OPTIONAL) and exc.name and not exc.name.startswith(("docpc", "llama_index", "lang")):
                    continue  # an extra that is not installed here (its own module names it)
                raise
        print(f"ok: {len(names)} modules import on Python {sys.version.split()[0]}")
        from langchain_docpc import DocPCRetriever as LangChainRetriever
        from llama_index.retrievers.docpc import DocPCRetriever as LlamaIndexRetriever

        from docpc_retrievers import DocPCIndex
        from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2

        with tempfile.TemporaryDirectory(prefix="docpc-smoke-") as tmp:
            folder = Path(tmp)
            step = "build the tiny checkpoint"
            model = build_tiny_colqwen2(folder / "tiny", seed=0)
            (folder / "pdfs").mkdir()
            pdfs = _pdfs(folder / "pdfs")
            step = "index three PDFs"
            with DocPCIndex.from_pdfs(pdfs, folder / "store", model=str(model), workers=0) as index:
                assert len(index) == 3, f"{len(index)} documents stored"
                step = "search"
                hits = index.search("quarterly revenue", 2)
                assert len(hits) == 2 and hits[0].score >= hits[1].score, hits
            print("ok: indexed 3 PDFs and searched them")
            step = "the LangChain retriever"
            with LangChainRetriever(persist_dir=str(folder / "store"), model=str(model), k=2) as retriever:
                docs = retriever.invoke("quarterly revenue")
                assert len(docs) == 2 and all(d.metadata.get("source") for d in docs), docs
            step = "the LlamaIndex retriever"
            with LlamaIndexRetriever.from_persist_dir(folder / "store", model=str(model), similarity_top_k=2) as r:
                nodes = r.retrieve("quarterly revenue")
                assert len(nodes) == 2, nodes
            print("ok: both framework retrievers answered")
    except Exception as exc:  # a smoke test reports any failure as one line and a non-zero exit
        print(f"FAILED at {step}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
