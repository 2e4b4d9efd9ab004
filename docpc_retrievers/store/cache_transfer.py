"""A store's local cache handed from one machine to another: what a new replica of a shard searcher starts from.

A warm reader's cache (store/cache.py: the search snapshot, the vectors it fetched, the change-feed position they
stand at) is written as one tar archive, taken under the store's lock after its snapshot is saved, so the position
and the snapshot agree. A new reader unpacks it into its own empty cache folder, opens the store as usual and
replays the change feed from that position: it pulls no document's payload one by one. The cache is checked against
the store it came from when opened (its engine identity), as any cache is.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import BinaryIO

from docpc_retrievers.errors import StoreError

__all__ = ["read_cache_archive", "write_cache_archive"]


def write_cache_archive(folder: Path, out: BinaryIO) -> int:
    """Every file of the cache ``folder`` into a tar stream on ``out``; returns how many files went in."""
    count = 0
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
            count += 1
    return count


def read_cache_archive(folder: Path, src: BinaryIO) -> int:
    """Unpack a :func:`write_cache_archive` stream into the empty (or new) cache ``folder``; StoreError for a folder
    that already holds a cache or an archive with anything but plain files inside it. Returns how many files."""
    if folder.exists() and any(folder.iterdir()):
        raise StoreError(f"{folder} already holds a cache; a replica starts from a snapshot into an empty one")
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=src, mode="r|") as tar:
        for member in tar:
            name = Path(member.name)
            if not member.isfile() or name.is_absolute() or ".." in name.parts:
                raise StoreError(f"a cache snapshot holds {member.name!r}, which is not a file inside the cache")
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member)
            if data is None:
                raise StoreError(f"a cache snapshot's {member.name!r} cannot be read")
            with open(target, "wb") as f:
                while chunk := data.read(1 << 20):
                    f.write(chunk)
            count += 1
    return count
