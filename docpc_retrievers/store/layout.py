"""Where everything of a store lives on disk: the one module that knows the paths of a store directory.

Layout of a store directory::

    <dir>/store.json             format and collection name (embedded mode; settings live in Chroma)
    <dir>/write.lock             single-writer lock (flock; embedded mode)
    <dir>/chroma/                Chroma's persistent directory (embedded mode)
    <dir>/cache/                 local cache of what searches read (vectors, summaries, grids); safe to delete
    <dir>/page_cache/            full-resolution page embeddings made by reranking (a store of its own)
    <dir>/docpc_retriever.json   options of the framework retriever that wrote the store

Every other module asks a :class:`StoreLayout` for a path instead of joining
names itself, and document ids pass :func:`check_doc_id` before they become
part of a path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docpc_retrievers.errors import DocumentNotFoundError, StoreError

__all__ = ["RETRIEVER_OPTIONS_FILE", "StoreLayout", "check_doc_id", "write_json_atomic"]

#: Document ids are content hashes: 32 lowercase hex characters.
_DOC_ID = re.compile(r"^[0-9a-f]{32}$")

#: What a store folder may hold before its manifest exists (a run stopped before its first commit).
RETRIEVER_OPTIONS_FILE = "docpc_retriever.json"
"""The file, inside a store's folder, that keeps the options of the framework retriever that wrote the store."""
_STORE_ENTRIES = frozenset({"store.json", "write.lock", "chroma", "cache", "page_cache", RETRIEVER_OPTIONS_FILE,
                            "vectors", "grids", "shards"})

#: Left out when a store is copied: the lock, temporary files and caches that rebuild themselves.
_NOT_COPIED = ("write.lock", ".tmp-*", "*.tmp", "page_cache", "cache")


def check_doc_id(doc_id: object, where: str = "the store") -> str:
    """Return ``doc_id`` when it has the shape of a document id; else raise :class:`DocumentNotFoundError`.

    Why: an id becomes part of a file name; ``"../../x"`` must never reach the file system.
    """
    if not isinstance(doc_id, str) or not _DOC_ID.match(doc_id):
        raise DocumentNotFoundError(doc_id, where)
    return doc_id


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class StoreLayout:
    """The paths of one store directory (see the module docstring)."""

    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> StoreLayout:
        """The layout of the store at ``path`` (user and relative paths resolved)."""
        return cls(Path(path).expanduser().resolve())

    @property
    def manifest(self) -> Path:
        return self.root / "store.json"

    @property
    def lock(self) -> Path:
        return self.root / "write.lock"

    @property
    def chroma(self) -> Path:
        return self.root / "chroma"

    @property
    def vectors(self) -> Path:
        return self.root / "vectors"

    @property
    def grids(self) -> Path:
        """Grid previews of a format-1 store (0.1); format 2 keeps them in Chroma."""
        return self.root / "grids"

    @property
    def shards(self) -> Path:
        """A sharded store's shards, each a store folder of its own (``shards/<i>``)."""
        return self.root / "shards"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def read_manifest(self) -> dict[str, Any]:
        """The local manifest (format, collection); empty when there is none, StoreError when unreadable."""
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{self.root} is a file; a store is a folder (give a new or empty folder)")
        try:
            data = json.loads(self.manifest.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"{self.manifest} is unreadable: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def cached_grid(self, doc_id: str) -> Path:
        """Where a grid preview read from Chroma is cached (the id is checked first)."""
        return self.cache / "grids" / f"{check_doc_id(doc_id, str(self.root))}.webp"

    @property
    def page_cache(self) -> Path:
        return self.root / "page_cache"

    @property
    def retriever_options(self) -> Path:
        return self.root / RETRIEVER_OPTIONS_FILE

    def exists(self) -> bool:
        """Whether a store has been created here."""
        return self.manifest.exists()

    def check_can_create(self) -> None:
        """Refuse, before anything is written, a path that is a file or a folder of other files (a store is
        written into its own folder: deleting the store must never delete a user's files)."""
        self.read_manifest()  # a file: refused there
        if self.exists() or not self.root.is_dir():
            return
        others = sorted(p.name for p in self.root.iterdir() if p.name not in _STORE_ENTRIES)
        if others:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise StoreError(f"{self.root} is not a docpc store and holds other files ({shown}); give a new or "
                             "empty folder for the store, e.g. a subfolder")

    def read_retriever_options(self) -> dict[str, Any]:
        """Options a framework retriever saved with the store ({} when none)."""
        path = self.retriever_options
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is unreadable: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return data

    def write_retriever_options(self, options: dict[str, Any]) -> None:
        """Save a framework retriever's options next to the store."""
        write_json_atomic(self.retriever_options, options)

    def copy_to(self, target: str | os.PathLike[str]) -> StoreLayout:
        """Copy this store into ``target`` (new or empty), leaving out the lock, temporary files and caches."""
        dest = StoreLayout.at(target)
        if dest.root.exists() and any(dest.root.iterdir()):
            raise FileExistsError(f"{dest.root} is not empty; copy a store into a new or empty directory")
        shutil.copytree(self.root, dest.root, ignore=shutil.ignore_patterns(*_NOT_COPIED), dirs_exist_ok=True)
        return dest
