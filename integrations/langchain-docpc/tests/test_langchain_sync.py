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
