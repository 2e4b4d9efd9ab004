"""Open PDFs with PyMuPDF, read their metadata and text, render chosen pages to PIL images.

Every failure to open or render a file raises :class:`~docpc_retrievers.errors.PDFLoadError`
with a stable ``kind`` (see :func:`open_pdf`), so callers can report or skip bad files.

Thread safety: PyMuPDF is not thread-safe. A :class:`PDFDocument` must be used from one
thread only; to render in parallel, open the file once per worker process.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # imported where used: pymupdf takes about a second to import (docpc info/list never need it)
    import pymupdf

from PIL import Image

from docpc_retrievers.errors import PDFLoadError

__all__ = [
    "PYMUPDF_LOCK",
    "DEFAULT_DPI",
    "DEFAULT_MAX_PIXELS",
    "PDFDocument",
    "PDFInfo",
    "open_pdf",
]

logger = logging.getLogger(__name__)

#: Resolution used by :meth:`PDFDocument.render` when neither ``dpi`` nor ``fit`` is given.
DEFAULT_DPI: float = 72.0
#: Hard cap on the pixel count of one rendered page (width * height).
DEFAULT_MAX_PIXELS: int = 4096 * 4096

# A PDF header may legally be preceded by junk; readers look in the first KiB.
_HEADER_WINDOW = 1024
# "%%EOF" must end a complete PDF; tolerate trailing whitespace or junk in the last KiB.
_TRAILER_WINDOW = 1024
_UNLIMITED_PIXELS = 2**62


@dataclass(frozen=True)
class PDFInfo:
    """Document-level facts about an opened PDF, cheap to store next to its embeddings."""

    path: str
    page_count: int
    title: str | None
    author: str | None
    page_labels: tuple[str, ...]
    file_bytes: int


def _clean_meta(value: object) -> str | None:
    """Return a metadata string without surrounding whitespace/NULs, or None when empty."""
    if not isinstance(value, str):
        return None
    cleaned = value.strip().strip("\x00").strip()
    return cleaned or None


def _roman(number: int) -> str:
    """Upper-case Roman numeral of a positive integer (used by page label styles r/R)."""
    parts: list[str] = []
    for value, symbol in (
        (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
        (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
    ):
        count, number = divmod(number, value)
        parts.append(symbol * count)
    return "".join(parts)


def _letters(number: int) -> str:
    """Upper-case letter numbering as the PDF spec defines it: A..Z, AA..ZZ, AAA.. (1-based)."""
    repeat, offset = divmod(number - 1, 26)
    return chr(ord("A") + offset) * (repeat + 1)


def _format_label(number: int, style: str, prefix: str) -> str:
    """Build one page label from a label rule's style, prefix and numeric value."""
    if number < 1 and style in {"r", "R", "a", "A"}:
        text = str(number)
    elif style == "D":
        text = str(number)
    elif style == "r":
        text = _roman(number).lower()
    elif style == "R":
        text = _roman(number)
    elif style == "a":
        text = _letters(number).lower()
    elif style == "A":
        text = _letters(number)
    else:
        text = ""
    return prefix + text


def _compute_page_labels(rules: Sequence[Mapping[str, Any]], page_count: int) -> list[str]:
    """Apply PDF page label rules to every page; unlabelled or blank pages get "1".."n"."""
    ordered = sorted(rules, key=lambda rule: int(rule.get("startpage", 0)))
    labels: list[str] = []
    position = -1
    for page in range(page_count):
        while position + 1 < len(ordered) and int(ordered[position + 1].get("startpage", 0)) <= page:
            position += 1
        label = ""
        if position >= 0:
            rule = ordered[position]
            start = int(rule.get("startpage", 0))
            first = int(rule.get("firstpagenum", 1) or 1)
            label = _format_label(
                page - start + first, str(rule.get("style") or ""), str(rule.get("prefix") or "")
            )
        labels.append(label or str(page + 1))
    return labels


def _has_pdf_header(head: bytes) -> bool:
    """True when the bytes at the start of a file contain the ``%PDF-`` marker."""
    return b"%PDF-" in head


def _zoom_limited(rect: pymupdf.Rect, zoom: float, box: tuple[int, int] | None, max_pixels: int) -> float:
    """Lower ``zoom`` until the rendered pixmap fits ``box`` (if any) and ``max_pixels``.

    MuPDF rounds the scaled page rectangle outwards, so the exact integer size is checked.
    """
    import pymupdf

    for _ in range(64):
        irect = (rect * pymupdf.Matrix(zoom, zoom)).irect
        width, height = irect.width, irect.height
        factor = 1.0
        if box is not None and (width > box[0] or height > box[1]):
            factor = min(factor, box[0] / max(width, 1), box[1] / max(height, 1))
        if width * height > max_pixels:
            factor = min(factor, math.sqrt(max_pixels / (width * height)))
        if factor >= 1.0:
            return zoom
        zoom *= min(factor, 0.9999)
    return zoom


#: PyMuPDF is not thread-safe, even across documents: every call into it in this
#: process (opening, rendering, text, closing) holds this lock. Re-entrant, so a
#: caller may hold it around several calls.
PYMUPDF_LOCK = threading.RLock()

_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run a method under :data:`PYMUPDF_LOCK`."""

    @wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with PYMUPDF_LOCK:
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class PDFDocument:
    """An opened PDF: metadata, page labels, page sizes, text and on-demand page rendering.

    Safe to share between threads: every PyMuPDF call takes :data:`PYMUPDF_LOCK`. Close it, or use it as a
    context manager, to release the file.
    """

    def __init__(self, path: Path, document: pymupdf.Document, file_bytes: int) -> None:
        """Wrap an already opened and authenticated PyMuPDF document (use :func:`open_pdf`)."""
        self.path: Path = path
        self._doc: pymupdf.Document | None = document
        self._file_bytes = file_bytes
        self.page_count: int = document.page_count
        metadata = document.metadata or {}
        self.title: str | None = _clean_meta(metadata.get("title"))
        self.author: str | None = _clean_meta(metadata.get("author"))
        self._page_labels: list[str] | None = None

    # -- lifecycle -------------------------------------------------------------------
    @_locked
    def close(self) -> None:
        """Release the underlying PyMuPDF document; further page access raises ValueError."""
        if self._doc is not None:
            self._doc.close()
            self._doc = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._doc is None

    def __enter__(self) -> PDFDocument:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.page_count} pages"
        return f"PDFDocument({str(self.path)!r}, {state})"

    # -- metadata --------------------------------------------------------------------
    @property
    @_locked
    def page_labels(self) -> list[str]:
        """Printed page labels ("i", "ii", "1", ...) when the PDF defines them, else "1".."n"."""
        if self._page_labels is None:
            document = self._document()
            rules: list[dict[str, Any]] = []
            try:
                rules = list(document.get_page_labels())
            except Exception as exc:  # broken /PageLabels tree: fall back to numbers
                logger.warning("%s: unreadable page labels (%s); using page numbers", self.path, exc)
            self._page_labels = _compute_page_labels(rules, self.page_count)
        return list(self._page_labels)

    @_locked
    def info(self) -> PDFInfo:
        """Return the document's metadata as an immutable :class:`PDFInfo`."""
        return PDFInfo(
            path=str(self.path),
            page_count=self.page_count,
            title=self.title,
            author=self.author,
            page_labels=tuple(self.page_labels),
            file_bytes=self._file_bytes,
        )

    # -- pages -----------------------------------------------------------------------
    @_locked
    def page_size(self, index: int) -> tuple[float, float]:
        """Width and height of a page in points, as displayed (rotation applied)."""
        page = self._load_page(self._check_index(index))
        rect = page.rect
        return (float(rect.width), float(rect.height))

    @_locked
    def render(
        self,
        indices: Sequence[int],
        *,
        dpi: float | None = None,
        fit: tuple[int, int] | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> list[Image.Image]:
        """Render only the requested pages to RGB images, in the order given.

        ``fit=(w, h)`` scales each page to fit that pixel box; otherwise ``dpi`` (default
        72) applies. ``max_pixels`` caps width*height per page by lowering the zoom, so a
        huge page box is downscaled instead of allocating a giant pixmap.
        """
        if dpi is not None and fit is not None:
            raise ValueError("pass either dpi or fit, not both")
        if dpi is not None and not (isinstance(dpi, (int, float)) and dpi > 0 and math.isfinite(dpi)):
            raise ValueError(f"dpi must be a positive number, got {dpi!r}")
        box: tuple[int, int] | None = None
        if fit is not None:
            if len(fit) != 2 or any(int(side) != side or side < 1 for side in fit):
                raise ValueError(f"fit must be (width, height) in whole pixels >= 1, got {fit!r}")
            box = (int(fit[0]), int(fit[1]))
        if int(max_pixels) != max_pixels or max_pixels < 1:
            raise ValueError(f"max_pixels must be a positive integer, got {max_pixels!r}")
        checked = [self._check_index(i) for i in self._as_index_list(indices)]
        images = [self._render_page(i, dpi, box, int(max_pixels)) for i in checked]
        logger.debug("%s: rendered pages %s", self.path, checked)
        return images

    @_locked
    def text(self, indices: Sequence[int]) -> list[str]:
        """Return the text layer of the chosen pages (empty string for image-only pages)."""
        checked = [self._check_index(i) for i in self._as_index_list(indices)]
        texts: list[str] = []
        for index in checked:
            page = self._load_page(index)
            try:
                texts.append(page.get_text("text"))
            except Exception as exc:
                raise PDFLoadError(
                    self.path, "render_failed", f"text of page {index} could not be extracted: {exc}"
                ) from exc
        return texts

    # -- internals -------------------------------------------------------------------
    def _document(self) -> pymupdf.Document:
        if self._doc is None:
            raise ValueError(f"{self.path}: document is closed")
        return self._doc

    @staticmethod
    def _as_index_list(indices: Sequence[int]) -> list[int]:
        if isinstance(indices, (int, str, bytes)):
            raise TypeError(f"indices must be a sequence of page indices, got {indices!r}")
        return list(indices)

    def _check_index(self, index: int) -> int:
        if isinstance(index, bool):
            raise TypeError(f"page index must be an integer, got {index!r}")
        value = operator.index(index)
        if not 0 <= value < self.page_count:
            raise IndexError(
                f"{self.path}: page index {value} out of range (document has {self.page_count} "
                f"pages, valid indices 0..{self.page_count - 1})"
            )
        return value

    def _load_page(self, index: int) -> pymupdf.Page:
        try:
            return self._document().load_page(index)
        except ValueError:
            raise
        except Exception as exc:
            raise PDFLoadError(self.path, "render_failed", f"page {index} could not be loaded: {exc}") from exc

    def _render_page(self, index: int, dpi: float | None, box: tuple[int, int] | None, max_pixels: int) -> Image.Image:
        page = self._load_page(index)
        rect = page.rect
        if rect.is_empty or rect.width <= 0 or rect.height <= 0:
            raise PDFLoadError(self.path, "render_failed", f"page {index} has an empty page box {tuple(rect)}")
        if box is not None:
            zoom = min(box[0] / rect.width, box[1] / rect.height)
        else:
            zoom = (DEFAULT_DPI if dpi is None else float(dpi)) / 72.0
        zoom = _zoom_limited(rect, zoom, box, _UNLIMITED_PIXELS)
        capped = _zoom_limited(rect, zoom, box, max_pixels)
        if capped < zoom:
            logger.info(
                "%s: page %d (%.0fx%.0f pt) downscaled to respect max_pixels=%d",
                self.path, index, rect.width, rect.height, max_pixels,
            )
        import pymupdf

        try:
            pixmap = page.get_pixmap(matrix=pymupdf.Matrix(capped, capped), colorspace=pymupdf.csRGB, alpha=False)
        except Exception as exc:
            raise PDFLoadError(self.path, "render_failed", f"page {index} could not be rendered: {exc}") from exc
        if pixmap.width < 1 or pixmap.height < 1:
            raise PDFLoadError(self.path, "render_failed", f"page {index} rendered to an empty image")
        if pixmap.n != 3:
            raise PDFLoadError(self.path, "render_failed", f"page {index}: unexpected pixmap with {pixmap.n} channels")
        return Image.frombytes("RGB", (pixmap.width, pixmap.height), pixmap.samples, "raw", "RGB", pixmap.stride)


@_locked
def open_pdf(
    path: str | os.PathLike[str],
    *,
    password: str | None = None,
    max_file_bytes: int | None = None,
) -> PDFDocument:
    """Open a PDF for reading, or raise :class:`PDFLoadError` saying why it cannot be used.

    Error kinds: ``not_found`` (missing or unreadable path), ``not_pdf`` (no PDF header and
    PyMuPDF cannot parse it, or a directory), ``corrupt`` (a 0-byte file, unparseable bytes
    after a PDF header, or a truncated file without ``%%EOF`` that repairs to zero pages),
    ``encrypted`` (password needed, none given), ``wrong_password``, ``empty`` (a complete
    file with zero pages, possibly after MuPDF's silent repair), ``too_large`` (bigger than
    ``max_file_bytes``). Rendering failures later raise ``render_failed``.
    """
    file_path = Path(path)
    try:
        stat = file_path.stat()
    except FileNotFoundError as exc:
        raise PDFLoadError(file_path, "not_found", "file not found") from exc
    except OSError as exc:
        raise PDFLoadError(file_path, "not_found", f"file cannot be accessed: {exc}") from exc
    if file_path.is_dir():
        raise PDFLoadError(file_path, "not_pdf", "is a directory, not a PDF file")
    size = stat.st_size
    if max_file_bytes is not None and size > max_file_bytes:
        raise PDFLoadError(
            file_path, "too_large", f"file is {size} bytes, larger than the limit of {max_file_bytes} bytes"
        )
    if size == 0:
        raise PDFLoadError(file_path, "corrupt", "file is empty (0 bytes); it was probably truncated")
    try:
        with file_path.open("rb") as handle:
            head = handle.read(_HEADER_WINDOW)
            handle.seek(max(0, size - _TRAILER_WINDOW))
            tail = handle.read(_TRAILER_WINDOW)
    except OSError as exc:
        raise PDFLoadError(file_path, "not_found", f"file cannot be read: {exc}") from exc
    has_header = _has_pdf_header(head)
    import pymupdf

    try:
        # Always force the PDF parser: without it MuPDF sniffs the content and would open
        # e.g. a text file as a text document.
        document = pymupdf.open(str(file_path), filetype="pdf")
    except pymupdf.EmptyFileError as exc:
        raise PDFLoadError(file_path, "corrupt", "file is empty (0 bytes); it was probably truncated") from exc
    except pymupdf.FileNotFoundError as exc:
        raise PDFLoadError(file_path, "not_found", "file not found") from exc
    except pymupdf.FileDataError as exc:
        if not has_header:
            raise PDFLoadError(file_path, "not_pdf", "not a PDF file (no %PDF- header)") from exc
        raise PDFLoadError(file_path, "corrupt", f"damaged PDF that cannot be parsed: {exc}") from exc
    except Exception as exc:
        raise PDFLoadError(file_path, "corrupt", f"PDF cannot be opened: {exc}") from exc

    try:
        if not document.is_pdf:
            # MuPDF sniffs content despite filetype="pdf": e.g. a PNG named .pdf opens as an image.
            detected = (document.metadata or {}).get("format") or "another format"
            raise PDFLoadError(file_path, "not_pdf", f"not a PDF file (content looks like: {detected})")
        if document.needs_pass:
            if password is None:
                raise PDFLoadError(
                    file_path,
                    "encrypted",
                    "PDF is encrypted and needs a password; pass one with password=... "
                    "(command line: --password)",
                )
            if not document.authenticate(password):
                raise PDFLoadError(
                    file_path, "wrong_password", "the password given does not open this encrypted PDF"
                )
            logger.debug("%s: decrypted with the given password", file_path)
        elif password is not None:
            logger.debug("%s: not encrypted; ignoring the password", file_path)

        page_count = document.page_count
        repaired = bool(document.is_repaired)
        if page_count == 0:
            if not has_header:
                raise PDFLoadError(file_path, "not_pdf", "not a PDF file (no %PDF- header)")
            if repaired and b"%%EOF" not in tail:
                raise PDFLoadError(
                    file_path, "corrupt", "truncated PDF (no %%EOF end marker); no pages could be recovered"
                )
            note = " (its structure is damaged; MuPDF repaired it and found no pages)" if repaired else ""
            raise PDFLoadError(file_path, "empty", f"PDF has zero pages{note}")
        if repaired:
            logger.warning("%s: damaged PDF repaired by MuPDF; %d pages recovered", file_path, page_count)
    except PDFLoadError:
        document.close()
        raise
    except Exception as exc:
        document.close()
        raise PDFLoadError(file_path, "corrupt", f"PDF cannot be read: {exc}") from exc

    logger.debug("%s: opened, %d pages, %d bytes", file_path, page_count, size)
    return PDFDocument(file_path, document, size)
