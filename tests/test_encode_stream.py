"""Encoding on its own thread (encoders/stream.py): the same vectors, bit for bit, as encoding in the loop; the
chunks gathered into full batches, each chunk's results handed back in order; errors and the timeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import clear_chroma_cache, make_pdf
from PIL import Image

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.encoders.protocol import EncodedImage
from docpc_retrievers.encoders.stream import EncodeStream
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.store.fields import SNIPPET_BYTES
from docpc_retrievers.timeline import Timeline

pytestmark = [pytest.mark.usefixtures("fresh_chroma")]


def _images(n: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    sizes = [(224, 280), (320, 240), (280, 280), (196, 392)]
    return [Image.fromarray(rng.integers(0, 255, (*sizes[i % 4][::-1], 3), dtype=np.uint8)) for i in range(n)]


def _same(a: list[EncodedImage], b: list[EncodedImage]) -> bool:
    return len(a) == len(b) and all(
        x.embeddings.tobytes() == y.embeddings.tobytes() and np.array_equal(x.visual_mask, y.visual_mask)
        and x.patch_grid == y.patch_grid for x, y in zip(a, b)
    )


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_stream_of_groups_gives_each_group_the_vectors_of_its_own_call(
    tiny_encoder: ColPaliEncoder, prefetch: bool
) -> None:
    groups = [_images(5, seed=1), _images(3, seed=2), _images(8, seed=3)]
    expected = [tiny_encoder.encode_images_with_info(g) for g in groups]
    before = tiny_encoder.prefetch
    tiny_encoder.prefetch = prefetch  # the next batch prepared on a helper thread, across groups too
    try:
        stages: list[str] = []
        got = list(tiny_encoder.encode_image_groups(iter(groups), on_span=lambda s, a, b: stages.append(s)))
    finally:
        tiny_encoder.prefetch = before
    assert all(_same(g, e) for g, e in zip(got, expected)) and len(got) == 3
    batches = sum(-(-len(g) // tiny_encoder.batch_size) for g in groups)
    assert stages.count("forward") == batches and stages.count("prepare") == batches


def test_the_stream_gathers_small_chunks_into_a_batch_and_answers_each_in_order(tiny_encoder: ColPaliEncoder) -> None:
    chunks = [_images(3, seed=4), _images(3, seed=5), _images(1, seed=6)]  # the encoder's batch is 4
    answers: list[tuple[int, list[EncodedImage]]] = []
    seen: list[int] = []
    real = tiny_encoder.encode_image_groups

    def recording(groups, *, on_span=None):  # type: ignore[no-untyped-def]
        def counted():  # type: ignore[no-untyped-def]
            for group in groups:
                seen.append(len(group))
                yield group
        return real(counted(), on_span=on_span)

    tiny_encoder.encode_image_groups = recording  # type: ignore[method-assign]
    try:
        with EncodeStream(lambda: tiny_encoder) as stream:
            for k, chunk in enumerate(chunks):
                stream.submit(chunk, lambda encoded, k=k: answers.append((k, encoded)))
            stream.drain()
            assert stream.busy_s > 0
    finally:
        del tiny_encoder.encode_image_groups
    assert seen == [6, 1]  # 3 + 3 gathered to fill a batch of 4; the last one sent by the drain
    assert [k for k, _ in answers] == [0, 1, 2]
    gathered = tiny_encoder.encode_images_with_info(chunks[0] + chunks[1])
    assert _same(answers[0][1] + answers[1][1], gathered)
    assert _same(answers[2][1], tiny_encoder.encode_images_with_info(chunks[2]))


def test_an_encoding_error_reaches_the_caller_and_stops_the_stream(tiny_encoder: ColPaliEncoder) -> None:
    class Broken:
        batch_size = 2

        def encode_images_with_info(self, images):  # type: ignore[no-untyped-def]
            raise RuntimeError("CUDA out of memory (forced)")

    stream = EncodeStream(lambda: Broken())  # type: ignore[arg-type, return-value]
    stream.submit(_images(2), lambda encoded: None)
    with pytest.raises(RuntimeError, match="forced"):
        stream.drain()
    with pytest.raises(RuntimeError, match="forced"):
        stream.submit(_images(2), lambda encoded: None)
    stream.close()

    failing_load = EncodeStream(lambda: (_ for _ in ()).throw(OSError("no such model")))  # type: ignore[arg-type]
    with pytest.raises(OSError, match="no such model"):
        _ = failing_load.encoder
    failing_load.close()


@pytest.mark.slow
def test_indexing_on_the_encoding_thread_stores_the_same_vectors_bit_for_bit(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    files = [make_pdf(tmp_path / "pdfs" / f"d{i}.pdf", f"stream {i}", 1 + i % 3) for i in range(11)]
    stored = {}
    for background in (False, True):
        for mode in ("grid", "page"):
            clear_chroma_cache()
            settings = IndexSettings() if mode == "grid" else IndexSettings(mode="page", pages=None)
            path = tmp_path / f"{mode}-{background}"
            with DocPCIndex(path, encoder=tiny_encoder, settings=settings, writable=True) as index:
                index._indexer.encode_in_background = background
                report = index.add_pdfs(files, batch_size=4, workers=0)
                assert len(report.indexed) == 11 and report.images_encoded >= 11
                stored[mode, background] = {d: index.store.vectors(d).tobytes() for d in report.indexed}
    assert stored["grid", True] == stored["grid", False]
    assert stored["page", True] == stored["page", False]


@pytest.mark.slow
def test_a_run_records_where_its_time_went(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    files = [make_pdf(tmp_path / "pdfs" / f"t{i}.pdf", f"timeline {i}") for i in range(6)]
    timeline = Timeline()
    with DocPCIndex(tmp_path / "S", encoder=tiny_encoder, writable=True) as index:
        index.add_pdfs(files, batch_size=2, workers=2, timeline=timeline)
    summary = timeline.summary()
    lanes = summary["lanes"]
    assert {"commit", "encode.forward", "loop.wait_render", "render"} <= set(lanes)
    assert lanes["render"]["lanes"] == 2 and sum(v["spans"] for k, v in lanes.items() if k.startswith("render:")) == 6
    assert lanes["commit"]["spans"] == 3 and lanes["encode.forward"]["spans"] == 2  # chunks of 2 gathered to 4
    assert all(0 < v["share"] <= 1 for v in lanes.values() if "share" in v and v.get("busy_s", 0) > 0)
    assert summary["wall_s"] > 0 and "rendered_waiting" in summary["queues"]
    plotted = timeline.to_dict()
    assert all(0 <= start <= end for _, start, end in plotted["spans"])


def test_the_union_of_overlapping_spans_is_counted_once() -> None:
    timeline = Timeline()
    t = timeline.started
    timeline.span("a", t + 1, t + 3)
    timeline.span("a", t + 2, t + 4)
    timeline.span("a", t + 6, t + 7)
    timeline.ended = t + 10
    assert timeline.summary()["lanes"]["a"] == {"busy_s": 4.0, "share": 0.4, "spans": 3}


@pytest.mark.slow
def test_a_long_text_is_kept_whole_while_the_record_holds_a_snippet(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    """Chroma full-text indexes the document field under Python's lock, so the record keeps a snippet and the
    whole text is payload; reading a document gives the whole text either way."""
    import pymupdf

    path = tmp_path / "long.pdf"
    doc = pymupdf.open()
    for n in range(3):
        page = doc.new_page()
        page.insert_textbox(pymupdf.Rect(40, 40, 560, 800), f"page {n} " + "lorem ipsum dolor " * 150, fontsize=7)
    doc.save(path)
    doc.close()
    with DocPCIndex(tmp_path / "S", encoder=tiny_encoder, writable=True) as index:
        (doc_id,) = index.add_pdfs([path], workers=0).indexed
        whole = index.store.texts([doc_id])[doc_id]
        assert len(whole.encode()) > 4 * SNIPPET_BYTES and "page 2" in whole
        record = index.store.engine.docs.get(ids=[doc_id], include=["documents"])["documents"][0]
        assert len(record.encode()) <= SNIPPET_BYTES and whole.startswith(record)


def test_a_failed_commit_skips_the_ones_queued_behind_it_and_is_raised() -> None:
    import threading

    from docpc_retrievers.commit_queue import CommitQueue

    done: list[int] = []
    gate = threading.Event()
    committer = CommitQueue(backlog=3)

    def commit(k: int) -> None:
        gate.wait(5)
        if k == 1:
            raise OSError("disk full (forced)")
        done.append(k)

    for k in range(3):  # queued without waiting for each other: the backlog holds 3
        committer.submit(lambda k=k: commit(k))
    gate.set()
    with pytest.raises(OSError, match="forced"):
        committer.wait()
    committer.close()
    assert done == [0]  # the one after the failure was skipped: what is committed stays a prefix


def test_a_timeline_tells_its_busiest_stages_in_one_line_and_saves_every_span(tmp_path: Path) -> None:
    import json

    timeline = Timeline()
    t = timeline.started
    timeline.span("encode.forward", t + 1, t + 7)
    timeline.span("commit", t + 2, t + 4)
    timeline.span("render:11", t, t + 5)
    timeline.span("render:12", t, t + 3)
    timeline.depth("encode_queue", 2)
    timeline.ended = t + 10
    assert timeline.headline() == "encode.forward 60%, render 40% (2 workers), commit 20% of 10.0 s"
    timeline.write(tmp_path / "t.json")
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["summary"]["lanes"]["render"]["lanes"] == 2 and len(saved["spans"]) == 4
    assert saved["depths"][0][0] == "encode_queue" and saved["depths"][0][2] == 2
