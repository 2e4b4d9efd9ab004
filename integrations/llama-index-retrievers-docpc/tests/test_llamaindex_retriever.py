"""DocPCRetriever for LlamaIndex: results, ids, images, edge cases, async, threads, persistence, engines."""

from __future__ import annotations

import asyncio
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
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
from llama_index.core.schema import ImageNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from docpc_retrievers import DocPCIndex, PDFLoadError
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.documents.pdf import open_pdf
from llama_index.retrievers.docpc import CONFIG_FILE, DocPCRetriever

REPO_ROOT = Path(__file__).resolve().parents[3]

QUERIES = [
    "What is the total revenue in the annual report?",
    "table of results on the benchmark",
    "installation guide and safety instructions",
    "figure showing the architecture",
    "invoice amount due",
    "arabic text",
]
PACKAGE_ROOT = REPO_ROOT / "integrations" / "llama-index-retrievers-docpc"


def _summary(nodes: list[NodeWithScore]) -> list[tuple[str, float]]:
    return [(n.node.node_id, round(float(n.score or 0.0), 5)) for n in nodes]


@pytest.fixture
def retriever(corpus_index: DocPCIndex) -> DocPCRetriever:
    return DocPCRetriever(corpus_index, similarity_top_k=5)


# --------------------------------------------------------------------------- packaging


def test_namespace_layout_and_py_typed() -> None:
    """llama_index/ and llama_index/retrievers/ stay namespace packages; the module is typed."""
    assert not (PACKAGE_ROOT / "llama_index" / "__init__.py").exists()
    assert not (PACKAGE_ROOT / "llama_index" / "retrievers" / "__init__.py").exists()
    assert (PACKAGE_ROOT / "llama_index" / "retrievers" / "docpc" / "py.typed").is_file()
    import llama_index.core
    import llama_index.retrievers.docpc as mod

    assert Path(mod.__file__).resolve().is_relative_to(PACKAGE_ROOT)
    assert Path(llama_index.core.__file__).resolve() != Path(mod.__file__).resolve()
    assert {"DocPCRetriever", "DocPCReader"} <= set(mod.__all__)


# --------------------------------------------------------------------------- results


def test_retrieve_returns_image_nodes_with_stored_grid(retriever: DocPCRetriever, corpus_index: DocPCIndex) -> None:
    nodes = retriever.retrieve(QUERIES[0])
    assert len(nodes) == 5
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, ImageNode) for n in nodes)
    scores = [n.score for n in nodes]
    assert scores == sorted(scores, reverse=True)
    expected = corpus_index.search(QUERIES[0], 5)
    assert [n.node.node_id for n in nodes] == [r.id for r in expected]
    for node_ws, result in zip(nodes, expected):
        node = node_ws.node
        assert node_ws.score == pytest.approx(result.score)
        assert node.image_mimetype == "image/webp"  # stored grids are WebP
        assert same_pixels(decode_b64_image(node.image), corpus_index.grid_image(node.node_id))
        assert node.text == corpus_index.text(node.node_id)
        assert node.ref_doc_id == node.node_id
        meta = node.metadata
        for key in ("source", "file_name", "total_pages", "selected_pages", "selected_labels", "strategy", "score"):
            assert key in meta, key
        assert meta["source"] == result.source
        assert meta["file_name"] == Path(result.source).name
        assert meta["selected_pages"] == result.selected_pages
        assert all(1 <= p <= meta["total_pages"] for p in meta["selected_pages"])
        assert meta["score"] == pytest.approx(result.score)
        assert None not in meta.values()
        assert not {"doc_id", "document_id", "ref_doc_id"} & set(meta)


def test_node_ids_are_stable_and_unique(retriever: DocPCRetriever) -> None:
    first = retriever.retrieve(QUERIES[1])
    second = retriever.retrieve(QUERIES[1])
    assert _summary(first) == _summary(second)
    ids = [n.node.node_id for n in first]
    assert len(set(ids)) == len(ids)


def test_llm_view_excludes_noisy_keys(retriever: DocPCRetriever) -> None:
    node = retriever.retrieve(QUERIES[2])[0].node
    llm_text = node.get_content(metadata_mode=MetadataMode.LLM)
    embed_text = node.get_content(metadata_mode=MetadataMode.EMBED)
    assert f"file_name: {node.metadata['file_name']}" in llm_text
    assert "selected_labels" in llm_text
    for noisy in ("layout", "file_mtime", "indexed_at", "model", "score"):
        assert f"{noisy}:" not in llm_text
        assert f"{noisy}:" not in embed_text
    assert "source:" in llm_text and "source:" not in embed_text
    assert "layout:" in node.get_content(metadata_mode=MetadataMode.ALL)


def test_query_bundle_and_string_give_the_same(retriever: DocPCRetriever) -> None:
    assert _summary(retriever.retrieve(QueryBundle(QUERIES[3]))) == _summary(retriever.retrieve(QUERIES[3]))


# --------------------------------------------------------------------------- edge cases


def test_k_zero_returns_nothing(corpus_index: DocPCIndex) -> None:
    assert DocPCRetriever(corpus_index, similarity_top_k=0).retrieve(QUERIES[0]) == []


def test_k_larger_than_corpus_returns_whole_corpus(corpus_index: DocPCIndex) -> None:
    nodes = DocPCRetriever(corpus_index, similarity_top_k=len(corpus_index) + 50).retrieve(QUERIES[0])
    assert len(nodes) == len(corpus_index)
    assert {n.node.node_id for n in nodes} == {r.id for r in corpus_index.get(corpus_index.store.ids())}


@pytest.mark.parametrize("query", ["", "   ", "\n\t "])
def test_empty_query_raises(retriever: DocPCRetriever, query: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        retriever.retrieve(query)


async def test_empty_query_raises_async(retriever: DocPCRetriever) -> None:
    with pytest.raises(ValueError, match="empty"):
        await retriever.aretrieve("  ")


def test_empty_index_returns_nothing(tiny_encoder: ColPaliEncoder) -> None:
    with DocPCRetriever.from_pdfs([], encoder=tiny_encoder) as retriever:
        assert len(retriever.index) == 0
        assert retriever.retrieve("anything at all") == []


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_bad_top_k_is_refused(corpus_index: DocPCIndex, bad: object) -> None:
    with pytest.raises(ValueError, match="similarity_top_k"):
        DocPCRetriever(corpus_index, similarity_top_k=bad)  # type: ignore[arg-type]


def test_bad_return_images_is_refused(corpus_index: DocPCIndex) -> None:
    with pytest.raises(ValueError, match="return_images"):
        DocPCRetriever(corpus_index, return_images="thumbnails")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value"), [("rerank_top_n", 0), ("page_budget", 0), ("grid_weight", 1.5), ("grid_weight", -0.1)]
)
def test_bad_rerank_options_are_refused(corpus_index: DocPCIndex, option: str, value: float) -> None:
    with pytest.raises(ValueError):
        DocPCRetriever(corpus_index, rerank=True, **{option: value})


def test_candidates_reach_the_store(corpus_index: DocPCIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """candidates (a constructor option, or the attribute changed between queries) is the store's first-stage count."""
    seen = record_candidates(corpus_index, monkeypatch)
    DocPCRetriever(corpus_index, similarity_top_k=2).retrieve(QUERIES[0])
    retriever = DocPCRetriever(corpus_index, similarity_top_k=2, candidates=7)
    retriever.retrieve(QUERIES[0])
    retriever.candidates = 11
    retriever.retrieve(QUERIES[0])
    assert seen == [None, 7, 11]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_candidates_are_refused(corpus_index: DocPCIndex, bad: object) -> None:
    with pytest.raises(ValueError, match="candidates"):
        DocPCRetriever(corpus_index, candidates=bad)  # type: ignore[arg-type]


def test_wrong_index_type_is_refused() -> None:
    with pytest.raises(TypeError, match="DocPCIndex"):
        DocPCRetriever("/some/path")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- images


def test_return_pages_gives_one_node_per_document(corpus_index: DocPCIndex) -> None:
    grid_nodes = DocPCRetriever(corpus_index, similarity_top_k=3).retrieve(QUERIES[4])
    page_nodes = DocPCRetriever(corpus_index, similarity_top_k=3, return_images="pages", page_dpi=50).retrieve(
        QUERIES[4]
    )
    # top-k counts documents, as in the LangChain retriever: the same documents, the same order and scores
    assert [n.node.node_id for n in page_nodes] == [g.node.node_id for g in grid_nodes]
    assert [n.score for n in page_nodes] == pytest.approx([g.score for g in grid_nodes])
    for n in page_nodes:
        meta = n.node.metadata
        assert meta["page_numbers"] == meta["selected_pages"] and len(meta["page_images_base64"]) == len(meta["page_numbers"])
        assert meta["image_page"] == meta["evidence_pages"][0] and n.node.image_mimetype == "image/png"
        assert n.node.image == meta["page_images_base64"][meta["page_numbers"].index(meta["image_page"])]
        assert "page_images_base64" in n.node.excluded_llm_metadata_keys
    first = page_nodes[0].node
    with open_pdf(first.metadata["source"]) as doc:
        rendered = doc.render([first.metadata["image_page"] - 1], dpi=50)[0]
    assert same_pixels(decode_b64_image(first.image), rendered)


def test_return_evidence_makes_the_explanation_picture_the_node_image(corpus_index: DocPCIndex) -> None:
    nodes = DocPCRetriever(corpus_index, similarity_top_k=2, return_images="evidence").retrieve(QUERIES[0])
    assert len(nodes) == 2
    for n in nodes:
        assert n.node.image_mimetype == "image/png"
        expected = corpus_index.explain(QUERIES[0], n.node.node_id, top_pages=0).overlay
        assert expected is not None and same_pixels(decode_b64_image(n.node.image), expected)
    default = DocPCRetriever(corpus_index, similarity_top_k=1).retrieve(QUERIES[0])[0].node
    assert default.image_mimetype == "image/webp"  # the default is still the stored grid


def test_return_images_none_gives_text_only(corpus_index: DocPCIndex) -> None:
    nodes = DocPCRetriever(corpus_index, similarity_top_k=2, return_images=None).retrieve(QUERIES[0])
    assert len(nodes) == 2
    assert all(n.node.image is None and n.node.image_mimetype is None for n in nodes)


def test_pages_of_a_changed_source_raise(tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder) -> None:
    pdf = tmp_path / "doc.pdf"
    shutil.copyfile(small_pdfs[2], pdf)
    with DocPCRetriever.from_pdfs([pdf], encoder=tiny_encoder, return_images="pages", page_dpi=30) as retriever:
        assert len(retriever.retrieve("anything")) >= 1
        shutil.copyfile(small_pdfs[0], pdf)
        with pytest.raises(PDFLoadError, match="changed since it was indexed"):
            retriever.retrieve("anything")


@needs_corpus
def test_encrypted_source_pages_use_the_password(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCRetriever.from_pdfs(
        [ENCRYPTED], encoder=tiny_encoder, password=ENCRYPTED_PASSWORD, return_images="pages", page_dpi=30
    ) as retriever:
        nodes = retriever.retrieve("password protected")
        assert [n.node.metadata["image_page"] for n in nodes] == [1]
        assert decode_b64_image(nodes[0].node.image).size[0] > 0


# --------------------------------------------------------------------------- reranking


RERANK = {"rerank": True, "rerank_top_n": 4, "page_budget": 2}


def test_rerank_rescores_the_top_documents(corpus_index: DocPCIndex) -> None:
    query = QUERIES[1]
    corpus_index.search(query, 3, rerank=True, rerank_top_n=4, page_budget=2)  # fill the page cache
    expected = corpus_index.search(query, 3, rerank=True, rerank_top_n=4, page_budget=2)
    plain = {r.id: r.score for r in corpus_index.search(query, len(corpus_index))}
    nodes = DocPCRetriever(corpus_index, similarity_top_k=3, **RERANK).retrieve(query)
    assert _summary(nodes) == [(r.id, round(r.score, 5)) for r in expected]
    assert all(n.node.metadata["reranked"] is True for n in nodes)
    for n in nodes:
        meta = n.node.metadata
        assert meta["grid_score"] == pytest.approx(plain[n.node.node_id])
        assert 1 <= len(meta["evidence_pages"]) <= 2
        assert all(1 <= p <= meta["total_pages"] for p in meta["evidence_pages"])
        assert "grid_score" not in n.node.get_content(metadata_mode=MetadataMode.LLM)
    assert not all(n.score == pytest.approx(plain[n.node.node_id]) for n in nodes), "fusion changed no score"


def test_rerank_from_a_thread_pool_matches_sequential(corpus_index: DocPCIndex) -> None:
    retriever = DocPCRetriever(corpus_index, similarity_top_k=3, **RERANK)
    for q in QUERIES:
        retriever.retrieve(q)  # fill the page cache: later calls all read cached page embeddings
    sequential = [_summary(retriever.retrieve(q)) for q in QUERIES * 2]
    with ThreadPoolExecutor(max_workers=6) as pool:
        concurrent = list(pool.map(lambda q: _summary(retriever.retrieve(q)), QUERIES * 2))
    assert concurrent == sequential


def test_unreranked_results_carry_grid_evidence(retriever: DocPCRetriever) -> None:
    for n in retriever.retrieve(QUERIES[0]):
        meta = n.node.metadata
        assert "reranked" not in meta and "grid_score" not in meta
        assert sorted(meta["evidence_pages"]) == sorted(meta["selected_pages"])
        assert "token_grid" not in meta


# --------------------------------------------------------------------------- async and threads


async def test_aretrieve_matches_retrieve(retriever: DocPCRetriever) -> None:
    got = await retriever.aretrieve(QUERIES[5])
    assert _summary(got) == _summary(retriever.retrieve(QUERIES[5]))


async def test_aretrieve_does_not_block_the_event_loop(
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

    async def query() -> list[NodeWithScore]:
        try:
            return await retriever.aretrieve(QUERIES[0])
        finally:
            done.set()

    nodes, _ = await asyncio.gather(query(), ticker())
    assert len(nodes) == 5
    assert ticks >= 10, f"the event loop ran only {ticks} times during a 0.5 s search"


def test_thread_pool_matches_sequential(retriever: DocPCRetriever) -> None:
    queries = QUERIES * 3
    sequential = [_summary(retriever.retrieve(q)) for q in queries]
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(lambda q: _summary(retriever.retrieve(q)), queries))
    assert concurrent == sequential


# --------------------------------------------------------------------------- building and persistence


def test_from_pdfs_persist_and_reload_give_identical_results(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="total_pages", value=1, operator=FilterOperator.GTE)])
    built = DocPCRetriever.from_pdfs(small_pdfs, encoder=tiny_encoder, similarity_top_k=3, filters=filters)
    temp_store = built.index.path
    assert len(built.index) == len(small_pdfs)
    before = [_summary(built.retrieve(q)) for q in QUERIES]
    built.persist(tmp_path / "saved")
    built.close()
    assert not temp_store.exists(), "the temporary store is deleted on close"
    with DocPCRetriever.from_persist_dir(tmp_path / "saved", encoder=tiny_encoder) as reloaded:
        assert reloaded.similarity_top_k == 3
        assert reloaded.filters == filters
        assert [_summary(reloaded.retrieve(q)) for q in QUERIES] == before
    assert (tmp_path / "saved" / CONFIG_FILE).is_file()
    assert not (tmp_path / "saved" / "write.lock").exists()


def test_persist_keeps_rerank_settings(corpus_index: DocPCIndex, tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    DocPCRetriever(corpus_index, rerank=True, rerank_top_n=7, page_budget=3, grid_weight=0.25).persist(
        tmp_path / "copy"
    )
    assert not (tmp_path / "copy" / "page_cache").exists()
    with DocPCRetriever.from_persist_dir(tmp_path / "copy", encoder=tiny_encoder) as reopened:
        assert (reopened.rerank, reopened.rerank_top_n, reopened.page_budget, reopened.grid_weight) == (
            True,
            7,
            3,
            0.25,
        )
        assert len(reopened.index) == len(corpus_index)


def test_page_mode_store(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder, caplog: pytest.LogCaptureFixture
) -> None:
    """A page-level store has no grids: nodes come without an image (once warned) or as pages."""
    from docpc_retrievers import IndexSettings

    settings = IndexSettings(mode="page", pages=None)
    with DocPCRetriever.from_pdfs(small_pdfs, encoder=tiny_encoder, settings=settings, similarity_top_k=2) as r:
        with caplog.at_level("WARNING"):
            nodes = r.retrieve(QUERIES[0])
            r.retrieve(QUERIES[1])
        assert len(nodes) == 2 and all(n.node.image is None for n in nodes)
        assert sum("page-mode" in rec.message for rec in caplog.records) == 1
        r.return_images = "pages"
        r.page_dpi = 20
        pages = r.retrieve(QUERIES[0])
        expected = [(n.node.node_id, list(range(1, n.node.metadata["total_pages"] + 1))) for n in nodes]
        assert [(p.node.node_id, p.node.metadata["page_numbers"]) for p in pages] == expected
        assert all(p.node.image for p in pages)


def test_persist_refuses_a_non_empty_target(corpus_index: DocPCIndex, tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("x")
    with pytest.raises(FileExistsError):
        DocPCRetriever(corpus_index).persist(tmp_path / "busy")


def test_persist_in_place_writes_only_settings(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    store = tmp_path / "store"
    with DocPCRetriever.from_pdfs(small_pdfs[:2], persist_dir=store, encoder=tiny_encoder) as retriever:
        retriever.similarity_top_k = 1
        retriever.persist(store)
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder, return_images=None) as reopened:
        assert reopened.similarity_top_k == 1
        assert reopened.return_images is None
        assert len(reopened.retrieve(QUERIES[0])) == 1


def test_from_pdfs_reopens_an_existing_store(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    store = tmp_path / "store"
    with DocPCRetriever.from_pdfs(small_pdfs[:2], persist_dir=store, encoder=tiny_encoder) as first:
        assert len(first.index.last_report.indexed) == 2
    with DocPCRetriever.from_pdfs(small_pdfs, persist_dir=store, encoder=tiny_encoder) as second:
        report = second.index.last_report
        assert len(report.skipped) == 2 and len(report.indexed) == len(small_pdfs) - 2
        assert len(second.index) == len(small_pdfs)


def test_from_defaults(corpus_index: DocPCIndex, corpus_store: Path, tiny_encoder: ColPaliEncoder) -> None:
    by_index = DocPCRetriever.from_defaults(corpus_index, similarity_top_k=2)
    with DocPCRetriever.from_defaults(persist_dir=corpus_store, encoder=tiny_encoder, similarity_top_k=2) as by_dir:
        assert _summary(by_index.retrieve(QUERIES[0])) == _summary(by_dir.retrieve(QUERIES[0]))
    with pytest.raises(ValueError, match="index=... or persist_dir"):
        DocPCRetriever.from_defaults()
    with pytest.raises(ValueError, match="either index or persist_dir"):
        DocPCRetriever.from_defaults(corpus_index, persist_dir=corpus_store)
    by_index.close()
    assert len(corpus_index) > 0, "closing a retriever must not close an index it was given"


# --------------------------------------------------------------------------- LlamaIndex machinery


def test_works_inside_a_query_engine_with_a_mock_llm(retriever: DocPCRetriever) -> None:
    from llama_index.core import get_response_synthesizer
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    engine = RetrieverQueryEngine(
        retriever, response_synthesizer=get_response_synthesizer(llm=MockLLM(max_tokens=8), response_mode="compact")
    )
    response = engine.query(QUERIES[0])
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in retriever.retrieve(QUERIES[0])]
    assert isinstance(response.response, str) and response.response.strip()


async def test_works_with_retriever_evaluator(retriever: DocPCRetriever, corpus_index: DocPCIndex) -> None:
    from llama_index.core.evaluation import RetrieverEvaluator

    evaluator = RetrieverEvaluator.from_metric_names(["hit_rate", "mrr"], retriever=retriever)
    top = corpus_index.search(QUERIES[1], 5)
    hit = await evaluator.aevaluate(QUERIES[1], expected_ids=[top[1].id])
    scores = hit.metric_vals_dict
    assert scores["hit_rate"] == 1.0
    assert scores["mrr"] == pytest.approx(0.5)
    miss = await evaluator.aevaluate(QUERIES[1], expected_ids=["0" * 32])
    assert miss.metric_vals_dict["hit_rate"] == 0.0


def test_options_given_to_from_pdfs_persist_with_the_store(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    """from_pdfs(persist_dir=D, similarity_top_k=3) then from_persist_dir(D) returns 3; explicit arguments win."""
    store = tmp_path / "store"
    with DocPCRetriever.from_pdfs(small_pdfs, persist_dir=store, encoder=tiny_encoder, similarity_top_k=3, page_dpi=50):
        pass
    assert (store / CONFIG_FILE).is_file()
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder) as reopened:
        assert (reopened.similarity_top_k, reopened.page_dpi) == (3, 50)
        assert len(reopened.retrieve(QUERIES[0])) == 3
    with DocPCRetriever.from_persist_dir(store, encoder=tiny_encoder, similarity_top_k=1) as explicit:
        assert len(explicit.retrieve(QUERIES[0])) == 1


def test_aggregate_reaches_page_mode_search(tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder) -> None:
    """aggregate= picks MaxP, AvgP or SumP on a page-mode store, as the core's search does."""
    from docpc_retrievers import IndexSettings

    settings = IndexSettings(mode="page", pages=None)
    with DocPCRetriever.from_pdfs(small_pdfs, encoder=tiny_encoder, settings=settings, return_images=None) as r:
        for aggregate in ("max", "mean", "sum"):
            r.aggregate = aggregate
            expected = r.index.search(QUERIES[0], 5, aggregate=aggregate)
            assert [(n.node.node_id, n.score) for n in r.retrieve(QUERIES[0])] == [(e.id, e.score) for e in expected]
        with pytest.raises(ValueError, match="aggregate"):
            DocPCRetriever(r.index, aggregate="median")


def test_from_pdfs_over_a_folder_without_pdfs_raises_and_creates_nothing(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    from docpc_retrievers.errors import SourceRootError

    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceRootError, match="no PDF under"):
        DocPCRetriever.from_pdfs(tmp_path / "empty", persist_dir=tmp_path / "store", encoder=tiny_encoder)
    assert not (tmp_path / "store").exists()
