"""DocPCRetriever for LangChain: documents, images, k/filter, edge cases, async, batch, chains, lifetime."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from docpc_retrievers.testing.support import (
    ENCRYPTED,
    ENCRYPTED_PASSWORD,
    decode_b64_image,
    needs_corpus,
    record_candidates,
    same_pixels,
)
from langchain_core.documents import Document

from docpc_retrievers import DocPCIndex
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.documents.pdf import open_pdf
from langchain_docpc import DEFAULT_K, DocPCRetriever

QUERIES = [
    "What is the total revenue in the annual report?",
    "table of results on the benchmark",
    "installation guide and safety instructions",
    "figure showing the architecture",
    "invoice amount due",
    "arabic text",
]


def _summary(docs: list[Document]) -> list[tuple[str | None, float]]:
    return [(d.id, round(float(d.metadata["score"]), 5)) for d in docs]


@pytest.fixture
def retriever(corpus_index: DocPCIndex) -> DocPCRetriever:
    return DocPCRetriever(index=corpus_index)


def test_package_is_typed_and_exports() -> None:
    import langchain_docpc

    assert (Path(langchain_docpc.__file__).parent / "py.typed").is_file()
    assert {"DocPCRetriever", "DocPCLoader"} <= set(langchain_docpc.__all__)


# --------------------------------------------------------------------------- results


def test_documents_carry_text_metadata_and_grid(retriever: DocPCRetriever, corpus_index: DocPCIndex) -> None:
    docs = retriever.invoke(QUERIES[0])
    expected = corpus_index.search(QUERIES[0], DEFAULT_K)
    assert len(docs) == DEFAULT_K
    assert [d.id for d in docs] == [r.id for r in expected]
    for rank, (doc, result) in enumerate(zip(docs, expected), 1):
        assert doc.page_content == corpus_index.text(result.id)
        meta = doc.metadata
        assert meta["score"] == pytest.approx(result.score)
        assert meta["rank"] == rank
        assert meta["source"] == result.source
        assert meta["file_name"] == Path(result.source).name
        assert meta["total_pages"] == result.total_pages
        assert meta["selected_pages"] == result.selected_pages
        assert len(meta["selected_labels"]) == len(meta["selected_pages"])
        assert meta["strategy"] == "first"
        assert meta["image_mime_type"] == "image/webp"  # stored grids are WebP
        assert same_pixels(decode_b64_image(meta["image_base64"]), corpus_index.grid_image(result.id))
        assert None not in meta.values()
        assert "token_grid" not in meta
        assert sorted(meta["evidence_pages"]) == sorted(meta["selected_pages"])
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_k_and_filter_per_call(retriever: DocPCRetriever, corpus_index: DocPCIndex) -> None:
    assert len(retriever.invoke(QUERIES[1], k=2)) == 2
    where = {"total_pages": {"$gte": 2}}
    multi = {r.id for r in corpus_index.get(corpus_index.store.ids(where))}
    assert multi and len(multi) < len(corpus_index)
    got = retriever.invoke(QUERIES[1], k=1000, filter=where)
    assert {d.id for d in got} == multi
    filtered = DocPCRetriever(index=corpus_index, k=1000, filter=where)
    assert {d.id for d in filtered.invoke(QUERIES[1])} == multi
    assert len(filtered.invoke(QUERIES[1], filter={"total_pages": 1})) == len(corpus_index) - len(multi)


def test_k_zero_and_k_beyond_corpus(retriever: DocPCRetriever, corpus_index: DocPCIndex) -> None:
    assert retriever.invoke(QUERIES[0], k=0) == []
    assert DocPCRetriever(index=corpus_index, k=0).invoke(QUERIES[0]) == []
    everything = retriever.invoke(QUERIES[0], k=len(corpus_index) + 10)
    assert len(everything) == len(corpus_index)
    assert len({d.id for d in everything}) == len(corpus_index)


@pytest.mark.parametrize("query", ["", "  ", "\n"])
def test_empty_query_raises(retriever: DocPCRetriever, query: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        retriever.invoke(query)


async def test_empty_query_raises_async(retriever: DocPCRetriever) -> None:
    with pytest.raises(ValueError, match="empty"):
        await retriever.ainvoke(" \t ")


def test_bad_k_and_unknown_kwargs(retriever: DocPCRetriever, corpus_index: DocPCIndex) -> None:
    with pytest.raises(ValueError):
        DocPCRetriever(index=corpus_index, k=-1)
    with pytest.raises(ValueError, match="k must be"):
        retriever.invoke(QUERIES[0], k=-3)
    with pytest.raises(TypeError, match="top_k"):
        retriever.invoke(QUERIES[0], top_k=3)
    assert len(retriever.invoke(QUERIES[0], k=1, verbose=False)) == 1


def test_empty_index_returns_nothing(tiny_encoder: ColPaliEncoder) -> None:
    with DocPCRetriever.from_pdfs([], encoder=tiny_encoder) as retriever:
        assert len(retriever.index) == 0
        assert retriever.invoke("anything") == []


def test_rerank_rescores_the_top_documents(corpus_index: DocPCIndex) -> None:
    query = QUERIES[1]
    options = {"rerank_top_n": 4, "page_budget": 2}
    corpus_index.search(query, 3, rerank=True, **options)  # fill the page cache
    expected = corpus_index.search(query, 3, rerank=True, **options)
    plain = {r.id: r.score for r in corpus_index.search(query, len(corpus_index))}
    retriever = DocPCRetriever(index=corpus_index, k=3, rerank=True, **options)
    docs = retriever.invoke(query)
    assert _summary(docs) == [(r.id, round(r.score, 5)) for r in expected]
    for d in docs:
        assert d.metadata["reranked"] is True
        assert d.metadata["grid_score"] == pytest.approx(plain[d.id])
        assert 1 <= len(d.metadata["evidence_pages"]) <= 2
    assert not all(d.metadata["score"] == pytest.approx(plain[d.id]) for d in docs), "fusion changed no score"
    unreranked = retriever.invoke(query, rerank=False)
    assert all("reranked" not in d.metadata for d in unreranked)
    assert [d.metadata["score"] for d in unreranked] == pytest.approx([plain[d.id] for d in unreranked])


def test_rerank_batch_matches_sequential(corpus_index: DocPCIndex) -> None:
    retriever = DocPCRetriever(index=corpus_index, k=3, rerank=True, rerank_top_n=4, page_budget=2)
    retriever.batch(QUERIES)  # fill the page cache: later calls all read cached page embeddings
    sequential = [_summary(retriever.invoke(q)) for q in QUERIES * 2]
    assert [_summary(d) for d in retriever.batch(QUERIES * 2, config={"max_concurrency": 6})] == sequential


def test_candidates_reach_the_store(corpus_index: DocPCIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """candidates (a field, a search_kwargs entry or a per-call option) is the first-stage count the store gets."""
    seen = record_candidates(corpus_index, monkeypatch)
    DocPCRetriever(index=corpus_index, k=2).invoke(QUERIES[0])
    fixed = DocPCRetriever(index=corpus_index, k=2, candidates=7)
    fixed.invoke(QUERIES[0])
    DocPCRetriever(index=corpus_index, search_kwargs={"k": 2, "candidates": 9}).invoke(QUERIES[0])
    fixed.invoke(QUERIES[0], candidates=11)
    assert seen == [None, 7, 9, 11]


@pytest.mark.parametrize("bad", [0, -3, "many"])
def test_bad_candidates_are_refused(corpus_index: DocPCIndex, bad: object) -> None:
    with pytest.raises(ValueError, match="candidates"):
        DocPCRetriever(index=corpus_index, candidates=bad)


@pytest.mark.parametrize(("option", "value"), [("rerank_top_n", 0), ("page_budget", 0), ("grid_weight", 1.5)])
def test_bad_rerank_options_are_refused(corpus_index: DocPCIndex, option: str, value: float) -> None:
    with pytest.raises(ValueError):
        DocPCRetriever(index=corpus_index, rerank=True, **{option: value})


def test_page_mode_store(tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder) -> None:
    """A page-level store has no grids: documents come without image_base64, or with page images."""
    from docpc_retrievers import IndexSettings

    settings = IndexSettings(mode="page", pages=None)
    with DocPCRetriever.from_pdfs(small_pdfs, encoder=tiny_encoder, settings=settings, k=2) as retriever:
        docs = retriever.invoke(QUERIES[0])
        assert len(docs) == 2 and all("image_base64" not in d.metadata for d in docs)
        pages = DocPCRetriever(index=retriever.index, k=2, return_images="pages", page_dpi=20).invoke(QUERIES[0])
        assert [len(d.metadata["page_images_base64"]) for d in pages] == [d.metadata["total_pages"] for d in docs]


def test_needs_an_index_or_a_store(corpus_index: DocPCIndex, corpus_store: Path) -> None:
    with pytest.raises(ValueError, match="index=DocPCIndex"):
        DocPCRetriever()
    with pytest.raises(ValueError, match="either index or persist_dir"):
        DocPCRetriever(index=corpus_index, persist_dir=str(corpus_store))
    with pytest.raises(ValueError, match="either index or persist_dir"):
        DocPCRetriever(index=corpus_index, model="some/other-model")
    with pytest.raises(TypeError, match="DocPCIndex"):
        DocPCRetriever(index="not an index")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- images


def test_return_pages(corpus_index: DocPCIndex) -> None:
    docs = DocPCRetriever(index=corpus_index, k=3, return_images="pages", page_dpi=40).invoke(QUERIES[4])
    assert len(docs) == 3
    for doc in docs:
        meta = doc.metadata
        assert meta["image_mime_type"] == "image/png"
        assert len(meta["page_images_base64"]) == len(meta["selected_pages"]) == len(meta["page_numbers"])
        best = meta["page_numbers"].index(meta["image_page"])  # the image is the page behind most of the score
        assert meta["image_page"] == meta["evidence_pages"][0]
        assert meta["image_base64"] == meta["page_images_base64"][best]
    first = docs[0].metadata
    with open_pdf(first["source"]) as pdf:
        rendered = pdf.render([p - 1 for p in first["selected_pages"]], dpi=40)
    for b64, image in zip(first["page_images_base64"], rendered):
        assert same_pixels(decode_b64_image(b64), image)


def test_image_format_converts_on_the_way_out(corpus_index: DocPCIndex) -> None:
    import base64
    import io

    from PIL import Image

    grid = DocPCRetriever(index=corpus_index, k=2).invoke(QUERIES[0])
    assert {d.metadata["image_mime_type"] for d in grid} == {"image/webp"}
    for fmt, mime in (("png", "image/png"), ("jpeg", "image/jpeg")):
        docs = DocPCRetriever(index=corpus_index, k=2, image_format=fmt).invoke(QUERIES[0])
        for doc, original in zip(docs, grid):
            assert doc.metadata["image_mime_type"] == mime
            with Image.open(io.BytesIO(base64.b64decode(doc.metadata["image_base64"]))) as img:
                assert img.format == fmt.upper()
                assert img.size == decode_b64_image(original.metadata["image_base64"]).size
    pages = DocPCRetriever(index=corpus_index, k=1, return_images="pages", page_dpi=30, image_format="jpeg").invoke(QUERIES[0])
    with Image.open(io.BytesIO(base64.b64decode(pages[0].metadata["page_images_base64"][0]))) as img:
        assert img.format == "JPEG"


def test_return_evidence_puts_the_explanation_picture_in_metadata(corpus_index: DocPCIndex) -> None:
    docs = DocPCRetriever(index=corpus_index, k=2, return_images="evidence").invoke(QUERIES[0])
    assert len(docs) == 2
    for doc in docs:
        meta = doc.metadata
        assert meta["image_mime_type"] == "image/png"
        picture = decode_b64_image(meta["image_base64"])
        expected = corpus_index.explain(QUERIES[0], doc.id, top_pages=0).overlay
        assert expected is not None and same_pixels(picture, expected)
        assert picture.size == corpus_index.grid_image(doc.id).size
    default = DocPCRetriever(index=corpus_index, k=1).invoke(QUERIES[0])[0].metadata
    assert default["image_mime_type"] == "image/webp"  # the default is still the stored grid


def test_return_images_none(corpus_index: DocPCIndex) -> None:
    docs = DocPCRetriever(index=corpus_index, k=2, return_images=None).invoke(QUERIES[0])
    assert len(docs) == 2
    assert all("image_base64" not in d.metadata and "image_mime_type" not in d.metadata for d in docs)
    with pytest.raises(ValueError):
        DocPCRetriever(index=corpus_index, return_images="thumbnails")  # type: ignore[arg-type]


@needs_corpus
def test_encrypted_pages_use_the_password(tiny_encoder: ColPaliEncoder) -> None:
    with DocPCRetriever.from_pdfs(
        [ENCRYPTED], encoder=tiny_encoder, password=ENCRYPTED_PASSWORD, return_images="pages", page_dpi=30
    ) as retriever:
        docs = retriever.invoke("password")
        assert len(docs) == 1 and len(docs[0].metadata["page_images_base64"]) == 1
        assert "openpassword" not in repr(retriever)
        assert "password" not in retriever.model_dump()


# --------------------------------------------------------------------------- async, batch


async def test_ainvoke_matches_invoke_and_takes_k(retriever: DocPCRetriever) -> None:
    got = await retriever.ainvoke(QUERIES[2], k=2)
    assert _summary(got) == _summary(retriever.invoke(QUERIES[2], k=2))
    assert len(got) == 2


async def test_ainvoke_does_not_block_the_event_loop(
    retriever: DocPCRetriever, corpus_index: DocPCIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = corpus_index.search_with

    def slow_search(*args: object, **kwargs: object) -> object:
        time.sleep(0.5)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(corpus_index, "search_with", slow_search)
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def query() -> list[Document]:
        try:
            return await retriever.ainvoke(QUERIES[0])
        finally:
            done.set()

    docs, _ = await asyncio.gather(query(), ticker())
    assert len(docs) == DEFAULT_K
    assert ticks >= 10, f"the event loop ran only {ticks} times during a 0.5 s search"


def test_batch_from_a_thread_pool_matches_sequential(retriever: DocPCRetriever) -> None:
    queries = QUERIES * 3
    sequential = [_summary(retriever.invoke(q)) for q in queries]
    batched = retriever.batch(queries, config={"max_concurrency": 8})
    assert [_summary(d) for d in batched] == sequential


async def test_abatch_matches_sequential(retriever: DocPCRetriever) -> None:
    sequential = [_summary(retriever.invoke(q)) for q in QUERIES]
    got = await retriever.abatch(QUERIES)
    assert [_summary(d) for d in got] == sequential


# --------------------------------------------------------------------------- building, chains


def test_from_pdfs_and_from_persist_dir(tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder) -> None:
    store = tmp_path / "store"
    with DocPCRetriever.from_pdfs(small_pdfs, persist_dir=store, encoder=tiny_encoder, k=2) as built:
        assert built.k == 2
        assert len(built.index) == len(small_pdfs)
        before = [_summary(built.invoke(q)) for q in QUERIES]
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder, k=2) as reopened:
        assert reopened.persist_dir == str(store)
        assert [_summary(reopened.invoke(q)) for q in QUERIES] == before
    with DocPCRetriever(persist_dir=str(store), encoder=tiny_encoder, k=2) as by_field:
        assert _summary(by_field.invoke(QUERIES[0])) == before[0]


def test_temporary_store_is_removed_on_close(small_pdfs: list[Path], tiny_encoder: ColPaliEncoder) -> None:
    retriever = DocPCRetriever.from_pdfs(small_pdfs[:2], encoder=tiny_encoder)
    path = retriever.index.path
    assert path.exists()
    retriever.close()
    assert not path.exists()


def test_closing_does_not_close_a_given_index(corpus_index: DocPCIndex) -> None:
    DocPCRetriever(index=corpus_index).close()
    assert len(DocPCRetriever(index=corpus_index).invoke(QUERIES[0], k=1)) == 1


def test_in_an_lcel_chain_with_a_fake_llm(retriever: DocPCRetriever) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    seen: list[str] = []

    def format_docs(docs: list[Document]) -> str:
        text = "\n\n".join(f"[{d.metadata['file_name']}] {d.page_content}" for d in docs)
        seen.append(text)
        return text

    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | FakeListChatModel(responses=["the answer"])
        | StrOutputParser()
    )
    assert chain.invoke(QUERIES[0]) == "the answer"
    names = [d.metadata["file_name"] for d in retriever.invoke(QUERIES[0])]
    assert all(f"[{name}]" in seen[0] for name in names)


def test_options_given_to_from_pdfs_persist_with_the_store(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    """from_pdfs(persist_dir=D, k=3) then from_persist_dir(D) returns 3; explicit arguments win."""
    store = tmp_path / "store"
    with DocPCRetriever.from_pdfs(small_pdfs, persist_dir=store, encoder=tiny_encoder, k=3, return_images=None):
        pass
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder) as reopened:
        assert (reopened.k, reopened.return_images) == (3, None)
        assert len(reopened.invoke(QUERIES[0])) == 3
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder, k=1) as explicit:
        assert len(explicit.invoke(QUERIES[0])) == 1


def test_aggregate_reaches_page_mode_search(tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder) -> None:
    """aggregate= picks MaxP, AvgP or SumP on a page-mode store, as the core's search does."""
    from docpc_retrievers import IndexSettings

    settings = IndexSettings(mode="page", pages=None)
    with DocPCRetriever.from_pdfs(small_pdfs, encoder=tiny_encoder, settings=settings, return_images=None) as r:
        for aggregate in ("max", "mean", "sum"):
            expected = r.index.search(QUERIES[0], 5, aggregate=aggregate)
            got = DocPCRetriever(index=r.index, aggregate=aggregate, return_images=None).invoke(QUERIES[0])
            assert [(d.id, d.metadata["score"]) for d in got] == [(e.id, e.score) for e in expected]
