"""Metadata users attach to their documents (department, customer, access group, year), checked up front.

It comes from a dict for every file, a callable ``path -> dict``, a JSON
sidecar next to a PDF (``report.pdf.json``) or a JSON file mapping paths to
objects; the more specific source wins (every file < sidecar < mapping file
< callable). Keys and values are checked before anything is rendered, against
what Chroma keeps and what hosted Chroma allows (32 keys per record, 4 KB per
value), so a mistake fails the run at once with the file and the key named.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, Union

from docpc_retrievers.errors import InvalidMetadataError

logger = logging.getLogger(__name__)

__all__ = [
    "BUILTIN_KEYS",
    "MAX_USER_KEYS",
    "MAX_VALUE_BYTES",
    "RESERVED_KEYS",
    "UserMetadata",
    "check_user_metadata",
    "edited_metadata",
    "load_meta_file",
    "metadata_keys",
    "parse_meta_option",
    "resolve_user_metadata",
    "user_part",
]

#: What a caller may pass: one dict for every file, or a callable giving each file's dict (or None).
UserMetadata = Union[Mapping[str, Any], Callable[[Path], Optional[Mapping[str, Any]]], None]  # noqa: UP007 - a runtime alias

#: Keys the library writes on every record; a user key of the same name would overwrite them.
BUILTIN_KEYS = frozenset({
    "source", "file_name", "title", "author", "total_pages", "selected_pages", "selected_labels", "mode",
    "strategy", "k", "layout", "file_bytes", "file_mtime", "indexed_at", "model", "token_grid",
})
#: Keys a result's metadata gains in the integrations, and those LlamaIndex writes itself.
RESERVED_KEYS = BUILTIN_KEYS | frozenset({
    "id", "score", "rank", "evidence_pages", "reranked", "grid_score", "doc_id", "document_id", "ref_doc_id",
    "page_images_base64", "image_mime_type", "image_base64",
})
#: Hosted Chroma allows 32 metadata keys per record; a record uses up to 16 public and 9 internal keys.
MAX_USER_KEYS = 7
#: Hosted Chroma's limit on one metadata value (a list counts as its JSON text).
MAX_VALUE_BYTES = 4096
_MAX_KEY_CHARS = 128
_SIDECAR_SUFFIX = ".json"


def check_user_metadata(metadata: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """The metadata as it will be stored, or :class:`InvalidMetadataError` naming ``origin`` and the key.

    Values: str, int, float, bool, or a non-empty list of one of those types; None drops a key.
    """
    if not isinstance(metadata, Mapping):
        raise InvalidMetadataError(f"{origin}: metadata must be a JSON object / dict, got {type(metadata).__name__}")
    clean: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or len(key) > _MAX_KEY_CHARS:
            raise InvalidMetadataError(f"{origin}: metadata key {key!r} must be a non-empty string of at most "
                                       f"{_MAX_KEY_CHARS} characters")
        if key.startswith(("_", "$", "chroma:")):
            raise InvalidMetadataError(f"{origin}: metadata key {key!r} is reserved (keys starting with '_', '$' or "
                                       "'chroma:' are the store's own)")
        if key in RESERVED_KEYS:
            raise InvalidMetadataError(
                f"{origin}: metadata key {key!r} is reserved: the library writes it; reserved keys are "
                f"{', '.join(sorted(RESERVED_KEYS))}"
            )
        if value is None:
            continue
        clean[key] = _checked_value(value, f"{origin}: metadata {key!r}")
    if len(clean) > MAX_USER_KEYS:
        raise InvalidMetadataError(
            f"{origin}: {len(clean)} metadata keys ({', '.join(sorted(clean))}); at most {MAX_USER_KEYS} fit beside "
            "the library's own keys within hosted Chroma's 32 keys per record"
        )
    return clean


def _checked_value(value: Any, where: str) -> Any:
    scalar = (str, bool, int, float)
    if isinstance(value, (list, tuple)):
        if not value:
            raise InvalidMetadataError(f"{where}: an empty list cannot be stored (Chroma refuses it); leave the key out")
        kinds = {type(v) for v in value}
        if len(kinds) != 1 or not isinstance(value[0], scalar):
            raise InvalidMetadataError(f"{where}: a list must hold values of one type (str, int, float or bool), "
                                       f"got {sorted(k.__name__ for k in kinds)}")
        for v in value:
            _checked_value(v, where)
        if len(json.dumps(list(value), ensure_ascii=False).encode("utf-8")) > MAX_VALUE_BYTES:
            raise InvalidMetadataError(f"{where}: the list is longer than {MAX_VALUE_BYTES} bytes")
        return list(value)
    if not isinstance(value, scalar):
        raise InvalidMetadataError(f"{where} has type {type(value).__name__}; use str, int, float, bool or a list "
                                   "of one of those (nested objects and bytes cannot be filtered on)")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidMetadataError(f"{where} is {value}; only finite numbers can be stored")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise InvalidMetadataError(f"{where}: {value} does not fit in a 64-bit integer")
    if isinstance(value, str) and len(value.encode("utf-8")) > MAX_VALUE_BYTES:
        raise InvalidMetadataError(f"{where} is longer than {MAX_VALUE_BYTES} bytes (hosted Chroma's limit)")
    return value


def parse_meta_option(items: Iterable[str]) -> dict[str, Any]:
    """``--meta`` options as a dict. ``key=value``: a number, boolean or list where the value parses as one in JSON
    (``year=2024``), else the text as given (``null`` and ``{...}`` stay text). ``key:=JSON``: the value must be
    JSON of a storable type (a string, number, boolean or list of one type); an object or null is refused."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        strict = key.endswith(":")
        key = key[:-1] if strict else key
        if not sep or not key.strip():
            raise InvalidMetadataError(f"--meta {item!r}: expected key=value or key:=JSON")
        try:
            value = json.loads(raw)
        except ValueError:
            if strict:
                raise InvalidMetadataError(f"--meta {item!r}: {raw!r} is not JSON (key=value stores text)") from None
            value = raw
        if strict and (value is None or isinstance(value, dict)):
            raise InvalidMetadataError(
                f"--meta {item!r}: metadata values are strings, numbers, booleans or lists of one of those; "
                + ("to remove a key use `docpc meta unset`" if value is None else "an object cannot be stored")
            )
        if isinstance(value, dict) or value is None:
            value = raw
        out[key.strip()] = value
    return check_user_metadata(out, "--meta")


def edited_metadata(stored: Mapping[str, Any], values: Mapping[str, Any], unset: Iterable[str]) -> dict[str, Any]:
    """A document's metadata with your ``values`` set and your ``unset`` keys removed (the library's keys refused)."""
    values = check_user_metadata(values, "metadata")
    removed = list(unset)
    check_user_metadata(dict.fromkeys(removed), "unset")  # the same key rules: a library key cannot be removed
    out = {k: v for k, v in stored.items() if k not in removed}
    out.update(values)
    check_user_metadata(user_part(out), "metadata")  # still within the key limit
    return out


def load_meta_file(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """A JSON object mapping PDF paths (relative to the file's folder, or absolute) to metadata objects."""
    file = Path(path).expanduser()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidMetadataError(f"--meta-file {file}: cannot be read ({exc})") from None
    except ValueError as exc:
        raise InvalidMetadataError(f"--meta-file {file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidMetadataError(f"--meta-file {file}: expected a JSON object mapping PDF paths to objects")
    out: dict[str, dict[str, Any]] = {}
    for name, meta in data.items():
        target = Path(name).expanduser()
        target = (target if target.is_absolute() else file.resolve().parent / target).resolve()
        out[str(target)] = check_user_metadata(meta, f"--meta-file {file} entry {name!r}")
    return out


def _sidecar(pdf: Path) -> dict[str, Any]:
    side = pdf.with_name(pdf.name + _SIDECAR_SUFFIX)
    if not side.is_file():
        return {}
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidMetadataError(f"{side}: the metadata sidecar cannot be read as JSON ({exc})") from None
    return check_user_metadata(data, str(side))


def resolve_user_metadata(
    files: Iterable[Path],
    metadata: UserMetadata = None,
    *,
    by_path: Mapping[str, Mapping[str, Any]] | None = None,
    sidecars: bool = True,
) -> dict[Path, dict[str, Any]]:
    """Each file's user metadata (only files that have some), checked; raises before anything is indexed."""
    common: dict[str, Any] = {}
    if metadata is not None and not callable(metadata):
        common = check_user_metadata(metadata, "metadata")
    out: dict[Path, dict[str, Any]] = {}
    files = list(files)
    unmatched = sorted(set(by_path or {}) - {str(Path(f).resolve()) for f in files})
    if unmatched:
        logger.warning("metadata for %d path%s matching no PDF of this run: %s", len(unmatched),
                       "" if len(unmatched) == 1 else "s", ", ".join(unmatched))
    for file in files:
        meta = dict(common)
        if sidecars:
            meta.update(_sidecar(file))
        if by_path:
            meta.update(by_path.get(str(Path(file).resolve()), {}))
        if callable(metadata):
            given = metadata(Path(file))
            if given is not None:
                meta.update(check_user_metadata(given, f"metadata({file})"))
        if meta:
            out[Path(file)] = check_user_metadata(meta, str(file))
    return out


def user_part(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The user's keys of a stored record's public metadata (everything the library did not write)."""
    return {k: v for k, v in metadata.items() if k not in BUILTIN_KEYS and not k.startswith("_") and v is not None}


def metadata_keys(metadatas: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The users' own keys over stored records' metadata (the library's left out) with how many documents have
    each, most common first."""
    counts: Counter[str] = Counter()
    for metadata in metadatas:
        counts.update(user_part(metadata).keys())
    return dict(counts.most_common())
