"""from_pdfs(prune=..., metadata=...) and the loader's metadata: the user's keys filter like the built-in ones."""

from __future__ import annotations

from pathlib import Path

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing.support import generated_pdfs
from langchain_docpc import DocPCLoader, DocPCRetriever


def _group(path: Path) -> dict[str, object]:
    n = int(path.stem.rsplit("-", 1)[1])
    return {"group": "even" if n % 2 == 0 else "odd", "n": n}


def test_user_metadata_filters_and_prune(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    docs = generated_pdfs(tmp_path / "docs", 4)
    store = tmp_path / "store"
    with DocPCRetriever.from_pdfs([docs], persist_dir=store, encoder=tiny_encoder, metadata=_group, k=4) as retriever:
        found = retriever.invoke("report", filter={"group": "even"})
        assert sorted(d.metadata["n"] for d in found) == [0, 2]
        assert all(d.metadata["group"] == "even" for d in found)
        found = retriever.invoke("report", k=1, filter={"n": {"$gte": 3}})
        assert [d.metadata["n"] for d in found] == [3]
    (docs / "generated-1.pdf").unlink()
    with DocPCRetriever.from_pdfs([docs], persist_dir=store, encoder=tiny_encoder, prune=True, k=4) as retriever:
        report = retriever.index.last_report
        assert report.counts()["removed"] == 1 and report.images_encoded == 0
        assert sorted(d.metadata["n"] for d in retriever.invoke("report")) == [0, 2, 3]  # metadata kept


def test_loader_carries_user_metadata(tmp_path: Path) -> None:
    docs = generated_pdfs(tmp_path / "docs", 2)
    (docs / "generated-1.pdf.json").write_text('{"customer": "acme"}')
    loaded = {Path(d.metadata["source"]).name: d.metadata for d in DocPCLoader(docs, metadata={"dept": "legal"}).load()}
    assert loaded["generated-0.pdf"]["dept"] == "legal" and "customer" not in loaded["generated-0.pdf"]
    assert loaded["generated-1.pdf"]["customer"] == "acme" and loaded["generated-1.pdf"]["dept"] == "legal"


def test_search_kwargs_and_unknown_options(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    import pytest

    docs = generated_pdfs(tmp_path / "docs", 5)  # document i has i+1 pages
    with DocPCRetriever.from_pdfs([docs], persist_dir=tmp_path / "store", encoder=tiny_encoder):
        pass
    store = str(tmp_path / "store")
    with DocPCRetriever(persist_dir=store, encoder=tiny_encoder, search_kwargs={"k": 2}) as retriever:
        assert len(retriever.invoke("report")) == 2
    kwargs = {"k": 5, "filter": {"total_pages": {"$gte": 4}}}
    with DocPCRetriever(persist_dir=store, encoder=tiny_encoder, search_kwargs=kwargs) as retriever:
        assert sorted(d.metadata["total_pages"] for d in retriever.invoke("report")) == [4, 5]
        with pytest.raises(TypeError, match="unknown option 'foo'.*known options: .*filter"):
            retriever.invoke("report", foo=1)
    with pytest.raises(TypeError, match="unknown option 'top_k'; known options: .*k, "):
        DocPCRetriever(persist_dir=store, encoder=tiny_encoder, top_k=2)
    with pytest.raises(TypeError, match="unknown option 'filters'"):
        DocPCRetriever(persist_dir=store, encoder=tiny_encoder, filters={"total_pages": 1})
    with pytest.raises(TypeError, match="search_kwargs got unknown option 'kk'"):
        DocPCRetriever(persist_dir=store, encoder=tiny_encoder, search_kwargs={"kk": 1})
    with pytest.raises(ValueError, match="given twice"):
        DocPCRetriever(persist_dir=store, encoder=tiny_encoder, k=2, search_kwargs={"k": 3})
    from docpc_retrievers import InvalidFilterError

    with pytest.raises(InvalidFilterError, match=r"\$gtee"):
        DocPCRetriever(persist_dir=store, encoder=tiny_encoder, filter={"total_pages": {"$gtee": 1}})


def test_the_retriever_adds_and_deletes_and_the_index_hands_out_retrievers(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    """add_pdfs / delete on the retriever, under= per call, thresholds, and DocPCIndex.as_retriever("langchain")."""
    docs = generated_pdfs(tmp_path / "docs", 3)
    more = generated_pdfs(tmp_path / "more", 2, label="more ")
    with DocPCRetriever.from_pdfs([docs], encoder=tiny_encoder, k=10) as retriever:
        report = retriever.add_pdfs(more, metadata={"batch": "second"})
        assert len(report.indexed) == 2 and len(retriever.index) == 5
        assert {Path(d.metadata["source"]).parent for d in retriever.invoke("report", under=str(more))} == {more}
        assert all(d.metadata["batch"] == "second" for d in retriever.invoke("report", filter={"batch": "second"}))
        everything = retriever.invoke("report")
        top = everything[0].metadata["score"]
        kept = retriever.invoke("report", min_score_ratio=0.999999)
        assert kept and all(d.metadata["score"] >= 0.999999 * top for d in kept) and len(kept) <= len(everything)
        assert retriever.invoke("report", score_threshold=top + 1.0) == []
        assert retriever.delete(str(more / "generated-0.pdf")) == 1 and len(retriever.index) == 4
        other = retriever.index.as_retriever("langchain", k=2, search_kwargs={"score_threshold": -1e9})
        assert isinstance(other, DocPCRetriever) and len(other.invoke("report")) == 2
        thresholded = DocPCRetriever(index=retriever.index, search_type="similarity_score_threshold",
                                     search_kwargs={"score_threshold": top + 1.0})
        assert thresholded.invoke("report") == []


def test_mmr_and_a_threshold_search_without_a_threshold_are_refused_with_the_reason(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    import pytest

    docs = generated_pdfs(tmp_path / "docs", 1)
    with DocPCRetriever.from_pdfs([docs], encoder=tiny_encoder) as retriever:
        with pytest.raises(ValueError, match="search_type='mmr' is not offered: .* min_score_ratio"):
            DocPCRetriever(index=retriever.index, search_type="mmr")
        with pytest.raises(ValueError, match="needs score_threshold"):
            DocPCRetriever(index=retriever.index, search_type="similarity_score_threshold")
        with pytest.raises(ValueError, match="min_score_ratio"):
            DocPCRetriever(index=retriever.index, min_score_ratio=2)
        with pytest.raises(ValueError, match="framework must be 'langchain' or 'llamaindex'"):
            retriever.index.as_retriever("haystack")
