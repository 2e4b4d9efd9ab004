#!/usr/bin/env python
"""LangChain quickstart: index a folder of PDFs with DocPC, retrieve whole documents, answer with your chat model.

    python examples/langchain_quickstart.py path/to/pdfs --store ./docpc-store \
        --query "Where is the warranty information?"

Every PDF becomes one image (K representative pages composed into a grid),
encoded once by a ColPali-family model (default: vidore/colqwen2-v1.0,
downloaded on first use). The retriever returns one Document per PDF:
``page_content`` is the selected pages' text, ``metadata["image_base64"]`` the
grid image (lossless WebP; its mime type travels with it) for a multimodal
model. Without a chat model (the default) the
script stops after retrieval; plug yours into ``make_chat_model()``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import HumanMessage

from langchain_docpc import DocPCRetriever

DEFAULT_MODEL = "vidore/colqwen2-v1.0"
DEFAULT_QUERIES = ("What is this document about?", "a page with a table or a figure")

logger = logging.getLogger("langchain_quickstart")


def make_chat_model(use_mock: bool) -> Any | None:
    """Return the chat model that answers from the retrieved documents, or None for retrieval only.

    This is where your model goes, for example (after ``pip install langchain-openai``):

        from langchain_openai import ChatOpenAI
        return ChatOpenAI(model="gpt-4o-mini")   # multimodal: it can read the grid images too

    ``--mock-llm`` uses LangChain's FakeListChatModel (a canned answer) to show the wiring offline.
    """
    if use_mock:
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        return FakeListChatModel(responses=["(mock answer) see the documents listed above"])
    return None


def format_docs(docs: Sequence[Document]) -> str:
    return "\n\n".join(f"[{d.metadata.get('file_name')}]\n{d.page_content}" for d in docs)


def multimodal_message(question: str, docs: Sequence[Document]) -> HumanMessage:
    """The question plus each retrieved PDF's grid image, as LangChain standard content blocks."""
    content: list[dict[str, Any]] = [{"type": "text", "text": f"Answer from these document pages: {question}"}]
    for d in docs:
        if "image_base64" in d.metadata:
            content.append({"type": "image", "base64": d.metadata["image_base64"], "mime_type": d.metadata["image_mime_type"]})
    return HumanMessage(content=content)  # type: ignore[arg-type]


def _pages(n: object) -> str:
    return "1 page" if n == 1 else f"{n} pages"


def print_results(query: str, docs: Sequence[Document]) -> None:
    print(f"\nQuery: {query}")
    if not docs:
        print("  no results")
    for d in docs:
        meta = d.metadata
        pages = ", ".join(str(p) for p in meta.get("selected_labels", []))
        title = meta.get("title") or meta.get("file_name")
        n_pages = _pages(meta.get("total_pages"))
        print(f"  {meta['rank']}. score {meta['score']:8.3f}  {title}  ({n_pages}; grid of pages {pages})")
        print(f"     {meta.get('source')}  id={d.id}")


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
    parser.add_argument("-k", "--top-k", type=int, default=3, help="documents per query (default 3)")
    parser.add_argument("--device", help="cuda, mps or cpu (default: best available)")
    parser.add_argument("--password", help="password for encrypted PDFs")
    parser.add_argument("--mock-llm", action="store_true", help="answer with a fake chat model to show the wiring")
    parser.add_argument("-v", "--verbose", action="store_true", help="show progress and info logs")
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)

    retriever = DocPCRetriever.from_pdfs(
        [args.pdfs],
        model=args.model,
        persist_dir=args.store,
        password=args.password,
        progress=args.verbose,
        encoder_kwargs={"device": args.device} if args.device else None,
        k=args.top_k,
    )
    with retriever:
        report = retriever.index.last_report
        print(f"{report.summary()}; the store holds {len(retriever.index)} documents.")
        for failure in report.failed:
            print(f"  failed: {failure.reason}")

        queries = list(args.query or DEFAULT_QUERIES)
        results = retriever.batch(queries)  # queries run concurrently; same results as one by one
        for query, docs in zip(queries, results):
            print_results(query, docs)

        chat_model = make_chat_model(args.mock_llm)
        if chat_model is None:
            print("\nNo chat model configured: retrieval only. Put your model in make_chat_model() to get answers.")
            return 0

        from langchain_core.output_parsers import StrOutputParser
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_core.runnables import RunnablePassthrough

        prompt = ChatPromptTemplate.from_template(
            "Answer the question from the documents below.\n\n{context}\n\nQuestion: {question}"
        )
        text_chain = (
            {"context": retriever | format_docs, "question": RunnablePassthrough()}
            | prompt
            | chat_model
            | StrOutputParser()
        )
        for query, docs in zip(queries, results):
            print(f"\nAnswer (text) to {query!r}: {text_chain.invoke(query)}")
            print(f"Answer (images) to {query!r}: {chat_model.invoke([multimodal_message(query, docs)]).content}")
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
