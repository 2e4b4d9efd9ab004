"""Indexing with render workers: the same result as rendering in-process, bad documents failing alone.

Real PDFs, real worker processes, the tiny random ColQwen2 and a real store. The
hanging document is a generated PDF whose content stream MuPDF chews on for a
minute; the crash is a real SIGKILL sent to the worker rendering it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from e2e_helpers import (
    ENCRYPTED,
    FOUR_PAGES,
    GOOGLE_DOC,
    MINIMAL,
    MULTICOLUMN,
    ROTATED,
    ZERO_PAGES,
    clear_chroma_cache,
    make_pdf,
    make_slow_pdf,
    needs_corpus,
)

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.documents.workers import RenderJob, RenderPool, default_workers, make_renderer
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.encoders.stream import EncodeStream
from docpc_retrievers.index import DocPCIndex

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow]


def _snapshot(index: DocPCIndex) -> dict[str, tuple[dict, bytes, bytes]]:
    """Per stored document: its metadata (less the time it was indexed), its int8 vectors and its grid bytes."""
    out = {}
    for doc_id in index.store.ids():
        meta = dict(index.store.get([doc_id])[0].metadata)
        meta.pop("indexed_at", None)
        vectors = index.store.vectors(doc_id)
        out[doc_id] = (meta, vectors.tobytes(), index.store.grid(doc_id))
    return out


@needs_corpus
def test_workers_give_the_same_store_and_report_as_rendering_in_process(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    files = [MINIMAL, FOUR_PAGES, ENCRYPTED, GOOGLE_DOC, ROTATED, ZERO_PAGES, MULTICOLUMN, MINIMAL]
    runs = {}
    for workers in (0, 2):
        clear_chroma_cache()
        with DocPCIndex(tmp_path / f"w{workers}", encoder=tiny_encoder, writable=True) as index:
            order: list[tuple[str, str]] = []
            report = index.add_pdfs(files, batch_size=2, workers=workers, on_file=lambda p, o: order.append((p.name, o)))
            runs[workers] = (report, order, _snapshot(index), [r.id for r in index.search("results table", top_k=10)])
    (seq, seq_order, seq_store, seq_hits), (par, par_order, par_store, par_hits) = runs[0], runs[2]
    assert par.indexed == seq.indexed  # the same commits, in the same order
    assert len(seq.indexed) == 5
    assert par.skipped == seq.skipped
    assert [(f.path, f.kind) for f in par.failed] == [(f.path, f.kind) for f in seq.failed]
    assert {f.kind for f in par.failed} == {"encrypted", "empty"}
    assert par_order == seq_order
    assert par.images_encoded == seq.images_encoded == 5
    assert par_store.keys() == seq_store.keys()
    for doc_id, (meta, vectors, grid) in seq_store.items():
        assert par_store[doc_id][0] == meta
        assert par_store[doc_id][1] == vectors, f"vectors of {doc_id} differ"  # bit-identical on the CPU
        assert par_store[doc_id][2] == grid
    assert par_hits == seq_hits
    assert par.timings["render_s"] > 0 and par.timings["commit_s"] > 0


def test_page_mode_feeds_the_encoder_full_batches_of_pages_and_commits_whole_documents_in_order(
    tmp_path: Path, tiny_encoder: ColPaliEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [make_pdf(tmp_path / f"d{i}.pdf", f"pages {i}", n) for i, n in enumerate((2, 4, 1))]
    settings = IndexSettings(mode="page", pages=None)
    stored = {}
    for batch_size in (3, 100):
        calls: list[int] = []
        groups: list[int] = []
        real_submit, real_groups = EncodeStream.submit, ColPaliEncoder.encode_image_groups

        def submitting(self, images, done, _real=real_submit, _calls=calls):  # type: ignore[no-untyped-def]
            _calls.append(len(images))
            return _real(self, images, done)

        def grouping(self, stream, *, on_span=None, _real=real_groups, _groups=groups):  # type: ignore[no-untyped-def]
            def counted():  # type: ignore[no-untyped-def]
                for group in stream:
                    _groups.append(len(group))
                    yield group
            return _real(self, counted(), on_span=on_span)

        monkeypatch.setattr(EncodeStream, "submit", submitting)
        monkeypatch.setattr(ColPaliEncoder, "encode_image_groups", grouping)
        clear_chroma_cache()
        with DocPCIndex(tmp_path / f"b{batch_size}", encoder=tiny_encoder, settings=settings, writable=True) as index:
            order: list[str] = []
            report = index.add_pdfs(files, batch_size=batch_size, workers=1, on_file=lambda p, o: order.append(p.name))
            assert report.indexed == [document_id(f) for f in files]  # committed in file order
            assert report.images_encoded == 7
            stored[batch_size] = {d: (index.store.get([d])[0].parts, index.store.vectors(d)) for d in report.indexed}
        assert calls == ([3, 3, 1] if batch_size == 3 else [7])  # full batches of pages across documents
        # Chunks under the encoder's batch (4) are gathered until they fill one; the rest goes when the run ends.
        assert groups == ([6, 1] if batch_size == 3 else [7])
        monkeypatch.undo()
    for doc_id, (parts, vectors) in stored[100].items():
        split_parts, split_vectors = stored[3][doc_id]
        assert len(split_parts) == len(parts) == {0: 2, 1: 4, 2: 1}[[document_id(f) for f in files].index(doc_id)]
        assert split_vectors.shape == vectors.shape
        assert abs(split_vectors - vectors).max() < 0.02  # within int8 steps: each page's own vectors


def test_a_hanging_document_times_out_alone(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    good = [make_pdf(tmp_path / "pdfs" / f"b{i}.pdf", f"good document {i}") for i in range(3)]
    slow = make_slow_pdf(tmp_path / "pdfs" / "a-slow.pdf", repeats=100)  # about a minute of rendering
    started = time.monotonic()
    with DocPCIndex(tmp_path / "S", encoder=tiny_encoder, writable=True) as index:
        report = index.add_pdfs([slow, *good], workers=1, render_timeout=1.5, batch_size=2)
        assert sorted(index.store.ids()) == sorted(document_id(p) for p in good)
    assert time.monotonic() - started < 45
    assert [(Path(f.path), f.kind) for f in report.failed] == [(slow, "render_timeout")]
    assert str(slow) in report.failed[0].reason and "1.5 s" in report.failed[0].reason
    assert sorted(report.indexed) == sorted(document_id(p) for p in good)


def _slow_start(folder: Path, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Render workers started from now on take ``seconds`` to start: a sitecustomize on their PYTHONPATH sleeps."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(f"import time\ntime.sleep({seconds})\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p))


def test_a_worker_s_start_up_is_not_counted_in_a_document_s_render_time(
    tmp_path: Path, tiny_encoder: ColPaliEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that takes 3 s to start still renders a quick document within a 1.5 s render timeout."""
    good = [make_pdf(tmp_path / "pdfs" / f"b{i}.pdf", f"good document {i}") for i in range(2)]
    _slow_start(tmp_path / "site", 3.0, monkeypatch)
    with DocPCIndex(tmp_path / "S", encoder=tiny_encoder, writable=True) as index:
        report = index.add_pdfs(good, workers=1, render_timeout=1.5, batch_size=2)
        assert sorted(index.store.ids()) == sorted(document_id(p) for p in good)
    assert report.failed == []


def test_a_worker_that_never_starts_fails_its_document_with_a_clear_reason(
    tmp_path: Path, tiny_encoder: ColPaliEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docpc_retrievers.documents import workers

    pdf = make_pdf(tmp_path / "pdfs" / "b.pdf", "good document")
    _slow_start(tmp_path / "site", 30.0, monkeypatch)
    monkeypatch.setattr(workers, "WORKER_START_LIMIT", 2.0)
    started = time.monotonic()
    with DocPCIndex(tmp_path / "S", encoder=tiny_encoder, writable=True) as index:
        report = index.add_pdfs([pdf], workers=1, render_timeout=1.0, batch_size=1)
        assert index.store.ids() == []
    assert time.monotonic() - started < 25
    assert [(Path(f.path), f.kind) for f in report.failed] == [(pdf, "render_timeout")]
    assert str(pdf) in report.failed[0].reason and "did not start within 2 s" in report.failed[0].reason


def render_workers() -> list[int]:
    """Pids of this process's render workers (children running the worker entry point), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "")
        if ppid == str(os.getpid()) and "documents.rendering import serve" in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def test_a_worker_killed_by_a_signal_fails_its_document_alone(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    good = [make_pdf(tmp_path / "pdfs" / f"b{i}.pdf", f"good document {i}") for i in range(3)]
    slow = make_slow_pdf(tmp_path / "pdfs" / "a-slow.pdf", repeats=100)
    killed: list[int] = []

    def kill_the_renderer() -> None:  # the first worker gets the slow document first
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            children = render_workers()
            if children:
                time.sleep(1.0)  # well inside its minute of rendering
                os.kill(children[0], signal.SIGKILL)
                killed.append(children[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_renderer)
    killer.start()
    try:
        with DocPCIndex(tmp_path / "S", encoder=tiny_encoder, writable=True) as index:
            report = index.add_pdfs([slow, *good], workers=1, render_timeout=120, batch_size=2)
            stored = sorted(index.store.ids())
    finally:
        killer.join()
    assert killed
    assert [(Path(f.path), f.kind) for f in report.failed] == [(slow, "render_crashed")]
    assert "SIGKILL" in report.failed[0].reason and str(slow) in report.failed[0].reason
    assert stored == sorted(report.indexed) == sorted(document_id(p) for p in good)  # rendered by the new worker
    assert _pixel_files() == []


def test_pool_hands_results_back_in_order_and_passes_unplanned_items_through(tmp_path: Path) -> None:
    files = [make_pdf(tmp_path / f"d{i}.pdf", f"order {i}", 1 + i % 3) for i in range(7)]
    job = RenderJob(IndexSettings(), None, None)
    with RenderPool(job, 3, ahead=5) as pool:
        out = list(pool.imap(files, lambda p: None if p.name == "d3.pdf" else (p, document_id(p))))
    assert [p for p, _ in out] == files
    assert out[3][1] is None
    for path, rendered in out[:3] + out[4:]:
        assert rendered is not None and rendered.failure is None and rendered.doc is not None
        assert rendered.doc.path == path.resolve()
        assert rendered.doc.metadata["total_pages"] == 1 + int(path.stem[1:]) % 3


def test_the_pool_renders_ahead_while_its_caller_is_busy(tmp_path: Path) -> None:
    """While the caller encodes a batch, the workers go on rendering the documents planned after it."""
    quick = make_pdf(tmp_path / "a.pdf", "first")
    slow = [make_slow_pdf(tmp_path / f"s{i}.pdf", repeats=1) for i in range(3)]  # about 0.6 s each
    job = RenderJob(IndexSettings(), None, None)
    with RenderPool(job, 1, ahead=4) as pool:
        results = pool.imap([quick, *slow], lambda p: (p, document_id(p)))
        first = next(results)
        assert first[1] is not None and first[1].doc is not None
        busy = 4.0
        time.sleep(busy)  # the caller is busy (encoding) while the worker renders the three slow ones
        t0 = time.perf_counter()
        rest = list(results)
        waited = time.perf_counter() - t0
    rendering = sum(r.seconds for _, r in rest if r is not None)
    assert [p for p, _ in rest] == slow and all(r is not None and r.doc is not None for _, r in rest)
    assert rendering > 0.9  # they really were slow to render...
    # ...but were rendered while the caller was busy, not when it asked: the caller waits at most for what was left
    # of them after its busy time (on a loaded machine rendering may outlast it), never for all of them
    assert waited < max(rendering - 0.5 * busy, 0.5 * rendering), (waited, rendering)


def test_render_workers_make_the_grid_previews(tmp_path: Path) -> None:
    from docpc_retrievers.documents.preview import encode_grid

    files = [make_pdf(tmp_path / f"d{i}.pdf", f"preview {i}", 2) for i in range(2)]
    with RenderPool(RenderJob(IndexSettings(), None, None, previews=True), 1) as pool:
        out = list(pool.imap(files, lambda p: (p, document_id(p))))
    for _, rendered in out:
        assert rendered is not None and rendered.doc is not None and rendered.doc.grid is not None
        assert rendered.preview == encode_grid(rendered.doc.grid.image)  # the bytes the store would have made
        assert rendered.preview_seconds > 0
    with RenderPool(RenderJob(IndexSettings(mode="page"), None, None, previews=True), 1) as pool:
        assert all(r is not None and r.preview is None for _, r in pool.imap(files, lambda p: (p, document_id(p))))


def _pixel_files() -> list[str]:
    from docpc_retrievers.documents.rendering import SPOOL_DIR, spool_prefix

    prefix = spool_prefix(os.getpid())
    return [n for n in os.listdir(SPOOL_DIR) if n.startswith(prefix)] if os.path.isdir(SPOOL_DIR) else []


def test_rendered_pixels_come_back_exactly_and_leave_no_files(tmp_path: Path) -> None:
    from docpc_retrievers.documents.rendering import detach_pixels, render_document

    files = [make_pdf(tmp_path / f"d{i}.pdf", f"pixels {i}", 3) for i in range(2)]
    for settings in (IndexSettings(), IndexSettings(mode="page", pages=None)):
        job = RenderJob(settings, None, None)
        with RenderPool(job, 1) as pool:
            out = list(pool.imap(files, lambda p: (p, document_id(p))))
        for path, rendered in out:
            here = render_document(job, path, document_id(path))
            assert rendered is not None and rendered.doc is not None and here.doc is not None
            assert [(i.mode, i.size, i.tobytes()) for i in rendered.doc.images] == [
                (i.mode, i.size, i.tobytes()) for i in here.doc.images
            ]
            assert len(rendered.doc.images) == (1 if settings.mode == "grid" else 3)
        assert _pixel_files() == []
    here = render_document(RenderJob(IndexSettings(), None, None), files[0], document_id(files[0]))
    assert detach_pixels(here, None, "unused") == (here, None)  # no spool: the pixels travel with the result


def test_a_new_pool_removes_pixel_files_left_by_a_pool_that_died(tmp_path: Path) -> None:
    from docpc_retrievers.documents.rendering import SPOOL_DIR, spool_prefix

    if not os.path.isdir(SPOOL_DIR) or not os.path.isdir("/proc"):
        pytest.skip("needs /dev/shm and /proc (Linux)")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a process that has exited: a pool that died
    gone.wait()
    orphan = Path(SPOOL_DIR) / f"{spool_prefix(gone.pid, 1)}1.raw"
    mine = Path(SPOOL_DIR) / f"{spool_prefix(os.getpid(), 1)}1.raw"
    orphan.write_bytes(b"x")
    mine.write_bytes(b"x")
    try:
        RenderPool(RenderJob(IndexSettings(), None, None), 1)
        assert not orphan.exists()
        assert mine.exists()  # a live pool's files are its own to remove
    finally:
        orphan.unlink(missing_ok=True)
        mine.unlink(missing_ok=True)


def test_renderer_choices_and_bad_arguments() -> None:
    job = RenderJob(IndexSettings(), None, None)
    assert type(make_renderer(job, workers=0)).__name__ == "InlineRenderer"
    assert isinstance(make_renderer(job, workers=2), RenderPool)
    assert 1 <= default_workers() <= 16
    assert [default_workers(n) for n in (1, 2, 4, 8, 9, 16, 64)] == [1, 1, 3, 7, 7, 14, 16]
    with pytest.raises(ValueError, match="workers"):
        make_renderer(job, workers=-1)
    with pytest.raises(ValueError, match="render_timeout"):
        RenderPool(job, 1, render_timeout=0)


def test_a_worker_over_its_memory_limit_fails_its_document_alone(tmp_path: Path) -> None:
    files = [make_pdf(tmp_path / f"d{i}.pdf", f"memory {i}", 2) for i in range(2)]
    job = RenderJob(IndexSettings(cell_size=(4000, 4000)), None, None)  # an 8000x8000 grid: 192 MB of pixels
    with RenderPool(job, 1, memory_limit=256 * 2**20) as pool:
        out = list(pool.imap(files, lambda p: (p, document_id(p))))
    kinds = [r.failure.kind if r is not None and r.failure else None for _, r in out]
    assert kinds == ["too_large", "too_large"], [r.failure for _, r in out if r is not None]
    assert "256 MiB" in out[0][1].failure.message  # type: ignore[union-attr]
    with RenderPool(RenderJob(IndexSettings(), None, None), 1, memory_limit=256 * 2**20) as pool:  # default grids fit
        assert all(r is not None and r.doc is not None for _, r in pool.imap(files, lambda p: (p, document_id(p))))


def test_a_worker_that_runs_out_of_memory_handing_pixels_back_reports_too_large_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copying the pixels out can pass a limit that rendering kept within: the document fails alone, not the worker."""
    from multiprocessing import Pipe

    from docpc_retrievers.documents import rendering

    real = rendering.detach_pixels
    files = [make_pdf(tmp_path / f"d{i}.pdf", f"hand back {i}", 1) for i in range(2)]

    def detach_once(result, spool, name):  # type: ignore[no-untyped-def]
        if result.doc is not None and result.doc.path == files[0]:
            raise MemoryError
        return real(result, spool, name)

    monkeypatch.setattr(rendering, "detach_pixels", detach_once)
    to_worker, tasks = Pipe()
    results, from_worker = Pipe()
    to_worker.send((RenderJob(IndexSettings(), None, None), None))
    for path in files:
        to_worker.send((path, document_id(path)))
    to_worker.send(None)
    handler = signal.getsignal(signal.SIGINT)
    try:
        rendering._worker_main(tasks, from_worker)  # in this process, so the forced failure reaches it
    finally:
        signal.signal(signal.SIGINT, handler)
    assert results.recv() == rendering.WORKER_READY
    (first, none), (second, pixels) = results.recv(), results.recv()
    assert none is None and first.doc is None and first.failure is not None
    assert first.failure.kind == "too_large" and str(files[0]) in first.failure.message
    assert second.failure is None and second.doc is not None
    assert rendering.attach_pixels(second, pixels).doc.grid.image is not None  # type: ignore[union-attr]


@needs_corpus
def test_a_page_and_a_grid_of_the_same_canvas_become_the_same_number_of_tokens(tiny_encoder: ColPaliEncoder) -> None:
    from docpc_retrievers.documents.represent import represent_pdf

    grid = represent_pdf(FOUR_PAGES, IndexSettings()).images[0]
    pages = represent_pdf(FOUR_PAGES, IndexSettings(mode="page", pages=None)).images
    bare = represent_pdf(FOUR_PAGES, IndexSettings(mode="page", pages=None, page_canvas=False)).images[0]
    assert grid.size == IndexSettings().page_size
    assert {p.size for p in pages} == {IndexSettings().page_size}
    assert bare.size != grid.size  # the page's own aspect ratio: fewer tokens at the same budget
    [g, p, b] = tiny_encoder.encode_images_with_info([grid, pages[0], bare])
    assert g.patch_grid == p.patch_grid and g.embeddings.shape == p.embeddings.shape
    assert b.patch_grid is not None and g.patch_grid is not None
    assert b.patch_grid[0] * b.patch_grid[1] < g.patch_grid[0] * g.patch_grid[1]


def test_page_canvas_is_recorded_and_old_page_stores_keep_bare_pages() -> None:
    assert IndexSettings(mode="page", pages=None).to_dict()["page_canvas"] is True
    for settings in (IndexSettings(grid=(2, 2)), IndexSettings(mode="page", pages=None, page_canvas=False)):
        assert IndexSettings.from_dict(settings.to_dict()) == settings
    old = IndexSettings(mode="page", pages=None).to_dict()
    del old["page_canvas"]
    assert IndexSettings.from_dict(old).page_canvas is False
    old_grid = IndexSettings().to_dict()
    del old_grid["page_canvas"]
    assert IndexSettings.from_dict(old_grid) == IndexSettings(grid=(2, 2))


def test_from_pdfs_at_the_top_level_of_a_script_renders_in_workers(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """Workers are fresh interpreters: a script without a ``__main__`` guard is not run again in them."""
    pdfs = [make_pdf(tmp_path / f"s{i}.pdf", f"script document {i}", 2) for i in range(3)]
    script = tmp_path / "quick.py"
    script.write_text(
        "import sys\n"
        "from docpc_retrievers import ColPaliEncoder, DocPCIndex\n"
        f"encoder = ColPaliEncoder({str(tiny_checkpoint)!r}, device='cpu', dtype='float32')\n"
        f"index = DocPCIndex.from_pdfs({[str(p) for p in pdfs]!r}, {str(tmp_path / 'S')!r}, encoder=encoder, workers=2)\n"
        "print('RESULT', len(index), len(index.last_report.failed))\n"
        "index.close()\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("RESULT") == 1 and "RESULT 3 0" in done.stdout
