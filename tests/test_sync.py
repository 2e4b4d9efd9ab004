"""Stores that follow their documents: moves, prunes, listing, deleting by folder or filter, user metadata."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import make_pdf
from PIL import Image

from docpc_retrievers import DocPCIndex, InvalidMetadataError, SourceRootError
from docpc_retrievers.encoders import ColPaliEncoder, EncodedImage


pytestmark = pytest.mark.usefixtures("fresh_chroma")


class CountingEncoder:
    """The tiny encoder, counting the images it is asked to encode (proof that nothing was re-encoded)."""

    def __init__(self, inner: ColPaliEncoder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.images = 0

    def encode_images(self, images: Sequence[Image.Image], *, batch_size: int | None = None) -> list[np.ndarray]:
        self.images += len(images)
        return self.inner.encode_images(images, batch_size=batch_size)

    def encode_images_with_info(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[EncodedImage]:
        self.images += len(images)
        return self.inner.encode_images_with_info(images, batch_size=batch_size)

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[np.ndarray]:
        return self.inner.encode_queries(queries, batch_size=batch_size)

    def settings(self) -> dict[str, Any]:
        return self.inner.settings()

    def __getattr__(self, name: str) -> Any:  # image_patch_grid, has_patch_grid, ...
        return getattr(self.inner, name)


@pytest.fixture()
def counting(tiny_encoder: ColPaliEncoder) -> CountingEncoder:
    return CountingEncoder(tiny_encoder)


def _folder(root: Path, labels: Sequence[str]) -> Path:
    for label in labels:
        make_pdf(root / f"{label}.pdf", f"sync document {label}", 2)
    return root


def _sources(index: DocPCIndex) -> dict[str, str]:
    return {d.id: str(d.source) for d in index.documents()}


def test_moved_folder_updates_sources_without_encoding(tmp_path: Path, counting: CountingEncoder) -> None:
    docs = _folder(tmp_path / "docs", ["a", "b", "c"])
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        first = index.add_pdfs([docs], workers=0)
        assert len(first.added) == 3 and counting.images == 3
        moved_to = tmp_path / "elsewhere" / "docs"
        moved_to.parent.mkdir()
        shutil.move(str(docs), str(moved_to))
        (moved_to / "b.pdf").rename(moved_to / "b-renamed.pdf")
        report = index.add_pdfs([moved_to], workers=0)
        assert report.counts()["moved"] == 3 and report.counts()["added"] == 0 and report.counts()["unchanged"] == 0
        assert counting.images == 3 and report.images_encoded == 0  # nothing re-encoded
        sources = _sources(index)
        assert sorted(Path(s).name for s in sources.values()) == ["a.pdf", "b-renamed.pdf", "c.pdf"]
        assert all(Path(s).parent == moved_to.resolve() for s in sources.values())
        renamed = next(r for r in index.documents() if r.source.endswith("b-renamed.pdf"))
        assert renamed.metadata["file_name"] == "b-renamed.pdf"
        # a copy left in place is a duplicate, not a move: the source stays where it was
        shutil.copy(moved_to / "a.pdf", tmp_path / "copy-of-a.pdf")
        again = index.add_pdfs([tmp_path / "copy-of-a.pdf"], workers=0)
        assert again.counts()["unchanged"] == 1 and again.counts()["moved"] == 0
        assert (moved_to / "a.pdf").resolve() in {Path(s) for s in _sources(index).values()}


def test_prune_removes_only_gone_sources_under_the_roots(tmp_path: Path, counting: CountingEncoder) -> None:
    a = _folder(tmp_path / "a", ["a1", "a2", "a3"])
    b = _folder(tmp_path / "b", ["b1", "b2"])
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        index.add_pdfs([a, b], workers=0)
        assert len(index) == 5
        (a / "a2.pdf").unlink()
        (b / "b1.pdf").unlink()  # outside the pruned root: must stay
        report = index.add_pdfs([a], prune=True, workers=0)
        assert report.counts() == {"added": 0, "replaced": 0, "moved": 0, "removed": 1, "unchanged": 2,
                                   "metadata_updated": 0, "failed": 0}
        names = sorted(Path(s).name for s in _sources(index).values())
        assert names == ["a1.pdf", "a3.pdf", "b1.pdf", "b2.pdf"]
        # without --prune nothing is removed
        (a / "a3.pdf").unlink()
        assert index.add_pdfs([a], workers=0).removed == [] and len(index) == 4


@pytest.mark.parametrize("root", ["does-not-exist", "empty"])
def test_prune_with_a_bad_root_deletes_nothing(tmp_path: Path, counting: CountingEncoder, root: str) -> None:
    a = _folder(tmp_path / "a", ["x1", "x2"])
    (tmp_path / "empty").mkdir()
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        index.add_pdfs([a], workers=0)
        shutil.rmtree(a)  # every source is gone: a prune of a mistyped root must still touch nothing
        with pytest.raises(SourceRootError, match=root):
            index.add_pdfs([tmp_path / root], prune=True, workers=0)
        with pytest.raises(SourceRootError):
            index.add_pdfs([tmp_path / "a"], prune=True, workers=0)  # the real root, gone: also refused
        assert len(index) == 2


def test_changed_file_is_replaced_and_reported(tmp_path: Path, counting: CountingEncoder) -> None:
    docs = _folder(tmp_path / "docs", ["p", "q"])
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        index.add_pdfs([docs], metadata={"team": "red"}, workers=0)
        old = {d.id for d in index.documents()}
        make_pdf(docs / "p.pdf", "sync document p, second edition", 3)
        report = index.add_pdfs([docs], workers=0)
        assert report.counts()["replaced"] == 1 and report.counts()["unchanged"] == 1 and len(report.replaced) == 1
        assert report.replaced[0] in old and len(index) == 2
        new = next(d for d in index.documents() if d.source.endswith("p.pdf"))
        assert new.total_pages == 3
        assert new.metadata["team"] == "red"  # the user's keys survive re-indexing


def test_documents_iterates_in_pages_and_filters(tmp_path: Path, counting: CountingEncoder) -> None:
    docs = _folder(tmp_path / "docs", [f"d{i}" for i in range(5)])
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        index.add_pdfs([docs], metadata=lambda p: {"n": int(p.stem[1:])}, workers=0)
        listed = list(index.documents(page=2))
        assert len(listed) == 5 and len({d.id for d in listed}) == 5
        assert all(d.metadata["indexed_at"] and d.total_pages == 2 for d in listed)
        high = list(index.documents(where={"n": {"$gte": 3}}, page=1))
        assert sorted(d.metadata["n"] for d in high) == [3, 4]


def test_delete_by_folder_and_where(tmp_path: Path, counting: CountingEncoder) -> None:
    a = _folder(tmp_path / "a", ["a1", "a2"])
    b = _folder(tmp_path / "b", ["b1", "b2", "b3"])
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        index.add_pdfs([a, b], metadata=lambda p: {"group": p.parent.name}, workers=0)
        shutil.rmtree(a)  # a folder that is gone on disk still names its documents
        assert index.delete([a]) == 2
        assert index.delete(where={"group": "b"}) == 3 and len(index) == 0


def test_user_metadata_sources_filters_and_updates(tmp_path: Path, counting: CountingEncoder) -> None:
    docs = _folder(tmp_path / "docs", ["m1", "m2", "m3"])
    (docs / "m2.pdf.json").write_text(json.dumps({"customer": "acme", "year": 2023}))
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        index.add_pdfs([docs], metadata={"dept": "legal", "year": 2024}, workers=0)
        by_name = {Path(d.source).name: d.metadata for d in index.documents()}
        assert by_name["m1.pdf"]["dept"] == "legal" and by_name["m1.pdf"]["year"] == 2024
        assert by_name["m2.pdf"]["customer"] == "acme" and by_name["m2.pdf"]["year"] == 2023  # sidecar wins
        hits = index.search("sync document", 10, filters={"customer": "acme"})
        assert [Path(h.source).name for h in hits] == ["m2.pdf"]
        hits = index.search("sync document", 10, filters={"year": {"$gte": 2024}})
        assert sorted(Path(h.source).name for h in hits) == ["m1.pdf", "m3.pdf"]
        # only the metadata changed: the record is updated, nothing is encoded
        encoded = counting.images
        report = index.add_pdfs([docs / "m3.pdf"], metadata={"dept": "finance"}, workers=0)
        assert report.metadata_updated and report.images_encoded == 0 and counting.images == encoded
        assert index.search("sync document", 10, filters={"dept": "finance"})[0].source.endswith("m3.pdf")
        # a move keeps the user's keys
        (docs / "m3.pdf").rename(docs / "m3-moved.pdf")
        index.add_pdfs([docs], workers=0)
        moved = next(d for d in index.documents() if d.source.endswith("m3-moved.pdf"))
        assert moved.metadata["dept"] == "finance"


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"source": "x"}, "reserved"),
        ({"_secret": 1}, "reserved"),
        ({"nested": {"a": 1}}, "has type dict"),
        ({"mixed": [1, "a"]}, "one type"),
        ({"empty": []}, "empty list"),
        ({"long": "x" * 5000}, "4096 bytes"),
        ({f"k{i}": i for i in range(8)}, "at most 7"),
        ({"nan": float("nan")}, "finite"),
    ],
)
def test_bad_user_metadata_fails_before_anything_is_indexed(
    tmp_path: Path, counting: CountingEncoder, metadata: dict[str, Any], message: str
) -> None:
    docs = _folder(tmp_path / "docs", ["z1"])
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        with pytest.raises(InvalidMetadataError, match=message):
            index.add_pdfs([docs], metadata=metadata, workers=0)
        assert len(index) == 0 and counting.images == 0


def test_bad_sidecar_names_the_file(tmp_path: Path, counting: CountingEncoder) -> None:
    docs = _folder(tmp_path / "docs", ["s1"])
    (docs / "s1.pdf.json").write_text("{not json")
    with DocPCIndex(tmp_path / "store", encoder=counting, writable=True) as index:
        with pytest.raises(InvalidMetadataError, match="s1.pdf.json"):
            index.add_pdfs([docs], workers=0)
        assert index.add_pdfs([docs], workers=0, sidecars=False).counts()["added"] == 1
