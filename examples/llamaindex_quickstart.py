#!/usr/bin/env python
"""LlamaIndex quickstart: index a folder of PDFs with DocPC, retrieve whole documents, answer with your LLM.

    python examples/llamaindex_quickstart.py path/to/pdfs --store ./docpc-store \
        --query "Where is the warranty information?"

Every PDF becomes one image (K representative pages composed into a grid),
encoded once by a ColPali-family model (default: vidore/colqwen2-v1.0,
downloaded on first use). Retrieval returns one ImageNode per PDF: the grid
image (base64 PNG) for a multimodal LLM and the selected pages' text for a
text LLM. Without an LLM (the default) the script stops after retrieval;
plug yours into ``make_llm()``.
"""

from __future__ import annotations

import argparse
import base64
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.schema import NodeWithScore

from llama_index.retrievers.docpc import DocPCRetriever

DEFAULT_MODEL = "vidore/colqwen2-v1.0"
DEFAULT_QUERIES = ("What is this document about?", "a page with a table or a figure")

logger = logging.getLogger("llamaindex_quickstart")


def make_llm(use_mock: bool) -> Any | None:
    """Return the LLM that answers from the retrieved documents, or None for retrieval only.

    This is where your LLM goes, for example (after ``pip install llama-index-llms-openai``):

        from llama_index.llms.openai import OpenAI
        return OpenAI(model="gpt-4o-mini")   # a multimodal model can also read the grid images

    ``--mock-llm`` uses LlamaIndex's MockLLM (it answers with filler text) to show the wiring offline.
    """
    if use_mock:
        from llama_index.core.llms import MockLLM

        return MockLLM(max_tokens=24)
    return None


def _pages(n: object) -> str:
    return "1 page" if n == 1 else f"{n} pages"


def print_results(query: str, nodes: Sequence[NodeWithScore]) -> None:
    print(f"\nQuery: {query}")
    if not nodes:
        print("  no results")
    for rank, hit in enumerate(nodes, 1):
        meta = hit.node.metadata
        pages = ", ".join(str(p) for p in meta.get("selected_labels", []))
        title = meta.get("title") or meta.get("file_name")
        print(f"  {rank}. score {hit.score:8.3f}  {title}  ({_pages(meta.get('total_pages'))}; grid of pages {pages})")
        print(f"     {meta.get('source')}  id={hit.node.node_id}")


def answer_with_text(retriever: DocPCRetriever, llm: Any, query: str) -> str:
    """A query engine: the LLM answers from the selected pages' text of the retrieved PDFs."""
    from llama_index.core import get_response_synthesizer
    from llama_index.core.query_engine import RetrieverQueryEngine

    engine = RetrieverQueryEngine(retriever, response_synthesizer=get_response_synthesizer(llm=llm))
    return str(engine.query(query))


def answer_with_images(llm: Any, query: str, nodes: Sequence[NodeWithScore]) -> str:
    """A multimodal chat call: the question plus each retrieved PDF's grid image."""
    from llama_index.core.llms import ChatMessage, ImageBlock, TextBlock

    blocks: list[Any] = [TextBlock(text=f"Answer from these document pages: {query}")]
    for hit in nodes:
        image = getattr(hit.node, "image", None)
        if image:
            blocks.append(ImageBlock(image=base64.b64decode(image), image_mimetype=hit.node.image_mimetype))
    return str(llm.chat([ChatMessage(role="user", blocks=blocks)]).message.content)


def _setup_logging(verbose: bool) -> None:
    """Warnings only by default (failed files are listed in the summary); -v shows info and progress bars."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("docpc_retrievers.index").setLevel(logging.ERROR)
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pdfs", type=Path, help="folder of PDFs (searched recursively) or one PDF")
    parser.add_argument(
        "--model", help=f"checkpoint id or local path (default: the model recorded in --store, else {DEFAULT_MODEL})"
    )
    parser.add_argument("--store", type=Path, help="store directory to create or reuse (default: a temporary one)")
    parser.add_argument("--query", action="append", help="query to run (repeatable)")
    parser.add_argument("--top-k", type=int, default=3, help="documents per query (default 3)")
    parser.add_argument("--device", help="cuda, mps or cpu (default: best available)")
    parser.add_argument("--password", help="password for encrypted PDFs")
    parser.add_argument("--mock-llm", action="store_true", help="answer with a mock LLM to show the wiring")
    parser.add_argument("-v", "--verbose", action="store_true", help="show progress and info logs")
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)

    encoder_kwargs = {"device": args.device} if args.device else None
    retriever = DocPCRetriever.from_pdfs(
        [args.pdfs],
        model=args.model,
        persist_dir=args.store,
        password=args.password,
        similarity_top_k=args.top_k,
        progress=args.verbose,
        encoder_kwargs=encoder_kwargs,
    )
    with retriever:
        report = retriever.index.last_report
        print(f"{report.summary()}; the store holds {len(retriever.index)} documents.")
        for failure in report.failed:
            print(f"  failed: {failure.reason}")

        llm = make_llm(args.mock_llm)
        for query in args.query or DEFAULT_QUERIES:
            nodes = retriever.retrieve(query)
            print_results(query, nodes)
            if llm is None:
                continue
            print(f"  Answer (text): {answer_with_text(retriever, llm, query)}")
            print(f"  Answer (images): {answer_with_images(llm, query, nodes)}")
        if llm is None:
            print("\nNo LLM configured: retrieval only. Put your LLM in make_llm() to get answers.")
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """:func:`main`, with the library's errors (wrong model for the store, bad filter, ...) as one message, exit 1."""
    from docpc_retrievers import DocPCError

    try:
        return main(argv)
    except DocPCError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
