"""from_pdfs(prune=..., metadata=...) and the reader's metadata: MetadataFilters see the user's keys."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing.support import generated_pdfs
from llama_index.retrievers.docpc import DocPCReader, DocPCRetriever


def _group(path: Path) -> dict[str, object]:
    n = int(path.stem.rsplit("-", 1)[1])
    return {"group": "even" if n % 2 == 0 else "odd", "n": n}


def test_user_metadata_filters_and_prune(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    docs = generated_pdfs(tmp_path / "docs", 4)
    store = tmp_path / "store"
    even = MetadataFilters(filters=[MetadataFilter(key="group", value="even")])
    retriever = DocPCRetriever.from_pdfs([docs], persist_dir=store, encoder=tiny_encoder, metadata=_group,
                                         similarity_top_k=4, filters=even)
    try:
        nodes = retriever.retrieve("report")
        assert sorted(n.node.metadata["n"] for n in nodes) == [0, 2]
        retriever.filters = MetadataFilters(filters=[MetadataFilter(key="n", value=3, operator=FilterOperator.GTE)])
        assert [n.node.metadata["n"] for n in retriever.retrieve("report")] == [3]
    finally:
        retriever.close()
    (docs / "generated-2.pdf").unlink()
    retriever = DocPCRetriever.from_pdfs([docs], persist_dir=store, encoder=tiny_encoder, prune=True,
                                         similarity_top_k=4, filters=None)
    try:
        assert retriever.index.last_report.counts()["removed"] == 1
        assert sorted(n.node.metadata["n"] for n in retriever.retrieve("report")) == [0, 1, 3]
    finally:
        retriever.close()


def test_reader_carries_user_metadata(tmp_path: Path) -> None:
    docs = generated_pdfs(tmp_path / "docs", 2)
    reader = DocPCReader(metadata=lambda p: {"year": 2020 + int(p.stem[-1])})
    years = sorted(d.metadata["year"] for d in reader.load_data(docs))
    assert years == [2020, 2021]


def test_unknown_options_are_refused_with_the_known_ones(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    import pytest

    from docpc_retrievers import DocPCIndex

    docs = generated_pdfs(tmp_path / "docs", 3)
    with DocPCIndex.from_pdfs([docs], tmp_path / "store", encoder=tiny_encoder, workers=0) as index:
        with pytest.raises(TypeError, match="unknown option 'top_k'; known options: .*similarity_top_k"):
            DocPCRetriever(index, top_k=2)


def test_the_retriever_adds_and_deletes_and_the_index_hands_out_retrievers(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    """add_pdfs / delete on the retriever, under= and a relative threshold, and DocPCIndex.as_retriever("llamaindex")."""
    from docpc_retrievers.testing.support import generated_pdfs
    from llama_index.retrievers.docpc import DocPCRetriever

    docs = generated_pdfs(tmp_path / "docs", 3)
    more = generated_pdfs(tmp_path / "more", 2, label="more ")
    with DocPCRetriever.from_pdfs([docs], encoder=tiny_encoder, similarity_top_k=10) as retriever:
        assert len(retriever.add_pdfs(more).indexed) == 2
        retriever.under = str(more)
        assert {Path(n.node.metadata["source"]).parent for n in retriever.retrieve("report")} == {more}
        retriever.under, retriever.min_score_ratio = None, 0.999999
        top = retriever.retrieve("report")
        assert top and all(n.score >= 0.999999 * top[0].score for n in top)
        assert retriever.delete([str(more)]) == 2 and len(retriever.index) == 3
        other = retriever.index.as_retriever("llamaindex", similarity_top_k=1)
        assert isinstance(other, DocPCRetriever) and len(other.retrieve("report")) == 1
