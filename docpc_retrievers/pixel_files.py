"""Images handed to another process through a file of raw pixels in shared memory, not pickled through a pipe.

A 4 MB grid pickled through a pipe costs milliseconds to write and to read, in both processes; its raw pixels
written to a RAM file system (``/dev/shm`` on Linux) and read back cost a copy each. Render workers hand their
pages to the indexing process this way, and the indexing process hands images to its encoding process.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from PIL import Image

__all__ = [
    "OWNED_PREFIXES", "SHARED_MEMORY", "PixelEntry", "read_images", "remove_files", "remove_orphans", "spool_dir",
    "unlink_quietly", "write_images",
]

SHARED_MEMORY = "/dev/shm"
"""A RAM file system where Linux has one."""

OWNED_PREFIXES = ("docpc-pixels-", "docpc-encode-")
"""Pixel file names start with one of these, then the pid of the process that owns them and a dash."""

PixelEntry = tuple[str, tuple[int, int], int, int]
"""One image in a pixel file: ``(mode, (width, height), offset, bytes)``."""


def spool_dir(*, fallback: bool = False) -> str | None:
    """Where pixel files go: shared memory where it is writable; else the temporary folder when ``fallback``
    (a file on disk still beats a pickle through a pipe), else None."""
    if os.access(SHARED_MEMORY, os.W_OK):
        return SHARED_MEMORY
    return tempfile.gettempdir() if fallback else None


def write_images(images: Sequence[Image.Image], path: str) -> tuple[PixelEntry, ...]:
    """Write the images' raw pixels to ``path``; where each one is. On any error the file is removed and the
    error raised (OSError: no room; MemoryError: the copy did not fit)."""
    entries: list[PixelEntry] = []
    offset = 0
    try:
        with open(path, "wb") as f:
            for image in images:
                data = image.tobytes()
                f.write(data)
                entries.append((image.mode, image.size, offset, len(data)))
                offset += len(data)
    except BaseException:
        unlink_quietly(path)
        raise
    return tuple(entries)


def read_images(path: str, entries: Sequence[PixelEntry]) -> list[Image.Image]:
    """The images written by :func:`write_images`, read back; the file is removed (also when reading fails)."""
    try:
        with open(path, "rb") as f:
            data = memoryview(f.read())
    finally:
        unlink_quietly(path)
    return [Image.frombytes(mode, size, data[off : off + n]) for mode, size, off, n in entries]


def unlink_quietly(path: str) -> None:
    """Remove a file that may be gone already."""
    try:
        os.unlink(path)
    except OSError:
        pass


def remove_files(prefix: str, folder: str = SHARED_MEMORY) -> None:
    """Remove the pixel files in ``folder`` whose names start with ``prefix`` (a process's leftovers)."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        unlink_quietly(os.path.join(folder, name))


def remove_orphans(folder: str = SHARED_MEMORY) -> None:
    """Remove pixel files whose owning process is gone (a run killed with images in flight left them)."""
    if not os.path.isdir("/proc"):  # no way to tell a live owner from a dead one here
        return
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        for prefix in OWNED_PREFIXES:
            if name.startswith(prefix):
                owner = name[len(prefix):].split("-", 1)[0]
                if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                    unlink_quietly(os.path.join(folder, name))
