"""Checkpoint resolution: local folder or hub id -> config, family, revision fingerprint; offline-aware."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docpc_retrievers.encoders.families import DEFAULT_MODEL, _family_from_config
from docpc_retrievers.encoders.identity import ModelIdentity, looks_like_path
from docpc_retrievers.errors import ModelLoadError

logger = logging.getLogger(__name__)

#: Seconds allowed for the one HEAD request that checks whether the Hub is reachable.
_HUB_PROBE_TIMEOUT_S = 3.0

#: Local weight/config files at or below this size are hashed whole for the fingerprint.
_FULL_HASH_LIMIT = 64 * 1024 * 1024
_SAMPLE_BYTES = 1024 * 1024
_FINGERPRINT_SUFFIXES = frozenset(
    {".json", ".safetensors", ".bin", ".pt", ".pth", ".model", ".txt", ".tiktoken", ".jinja"}
)




@dataclass(frozen=True)
class _Checkpoint:
    """What was found about a checkpoint before loading it."""

    model_id: str  # hub id as given, or resolved local folder; what from_pretrained gets
    config: dict[str, Any]  # config.json of the model (of the base model for a PEFT adapter)
    config_origin: str
    base_model: str | None  # PEFT adapter's base_model_name_or_path
    revision: str | None  # hub commit hash, when known (hub id, cache snapshot or ``--local-dir`` copy)
    local_files_only: bool
    fingerprint: str | None = None  # "sha256:..." over the checkpoint folder's files (see fingerprint_folder)
    hub_id: str | None = None  # the Hugging Face repo id, when known
    folder: Path | None = None  # where the files are: the local folder, or the hub snapshot in the cache

    def identity(self, family: str) -> ModelIdentity:
        """The model's identity as a store records it (the fingerprint is computed here if not yet known)."""
        fingerprint = self.fingerprint
        if fingerprint is None and self.folder is not None and self.folder.is_dir():
            fingerprint = fingerprint_folder(self.folder)
        local = self.model_id if looks_like_path(self.model_id) else None
        return ModelIdentity(
            family=family,
            fingerprint=fingerprint,
            hub_id=self.hub_id,
            revision=self.revision,
            path=local,
            base_model=self.base_model,
            model_id=self.model_id,
        )


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_offline() -> bool:
    """True when the user asked for offline mode (env read now, or huggingface_hub's import-time flag)."""
    if _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE"):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        return False
    return bool(constants.HF_HUB_OFFLINE)


def _hub_reachable(timeout: float = _HUB_PROBE_TIMEOUT_S) -> bool:
    """One HEAD request to the Hub endpoint, no retries: avoids huggingface_hub's ~25 s of backoff offline."""
    try:
        from huggingface_hub import constants, get_session

        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as exc:  # any failure (DNS, refused, timeout, proxy) means: treat as offline
        logger.debug("Hugging Face Hub not reachable: %r", exc)
        return False
    return True


class _HubAccess:
    """Decides once, and only if the Hub is actually needed, whether to stay in the local cache."""

    def __init__(self, local_files_only: bool | None) -> None:
        self.requested = local_files_only
        self._resolved: bool | None = None

    @property
    def used(self) -> bool:
        """True once some hub lookup asked for :meth:`local_only`."""
        return self._resolved is not None

    def local_only(self) -> bool:
        """``local_files_only`` to use: as given; else True under offline env or when the Hub is unreachable."""
        if self._resolved is None:
            if self.requested is not None:
                self._resolved = self.requested
            elif _hub_offline():
                self._resolved = True
            elif not _hub_reachable():
                logger.warning(
                    "Hugging Face Hub is not reachable; using the local cache only (as with HF_HUB_OFFLINE=1)."
                )
                self._resolved = True
            else:
                self._resolved = False
        return self._resolved


HOW_TO_FIX = "To use a local copy:"
"""Where a message's advice on fetching a checkpoint begins (a store's loader replaces it with the store's model)."""


def _how_to_fix(model: str) -> str:
    hub_id = model if not looks_like_path(model) and model.count("/") == 1 else DEFAULT_MODEL
    return (
        f"{HOW_TO_FIX} on a machine with internet access run "
        f"`hf download {hub_id} --local-dir DIR` (older huggingface_hub: `huggingface-cli download ...`), "
        "copy DIR here and pass it as the model (`--model DIR`, or ColPaliEncoder('DIR')); or populate the "
        "Hugging Face cache (HF_HOME) and set HF_HUB_OFFLINE=1. A PEFT adapter also needs its base model "
        "(adapter_config.json 'base_model_name_or_path') available the same way."
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object.")
    return data


def fingerprint_folder(folder: Path) -> str:
    """Cheap content fingerprint of a checkpoint folder (configs, tokenizer, weights; big files sampled).

    Only the folder's own files count (not ``.cache/`` or sub-folders), by name, size and content:
    a copy or a renamed folder has the same fingerprint, other weights or configs another.
    """
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in _FINGERPRINT_SUFFIXES):
        size = file.stat().st_size
        digest.update(f"{file.name}\0{size}\0".encode())
        with file.open("rb") as fh:
            if size <= _FULL_HASH_LIMIT:
                for chunk in iter(lambda: fh.read(_SAMPLE_BYTES), b""):
                    digest.update(chunk)
            else:  # head, middle and tail: catches different weights without reading gigabytes
                for offset in (0, size // 2, size - _SAMPLE_BYTES):
                    fh.seek(offset)
                    digest.update(fh.read(_SAMPLE_BYTES))
    return "sha256:" + digest.hexdigest()[:32]


def hub_origin(folder: Path) -> tuple[str | None, str | None]:
    """``(hub id, commit hash)`` of a folder that came from the Hub, as far as the folder tells.

    A snapshot in the Hugging Face cache (``models--org--name/snapshots/<commit>``) tells both; a
    ``hf download --local-dir`` copy keeps the commit in ``.cache/huggingface/download/*.metadata``.
    """
    folder = folder.resolve()
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name[len("models--"):].replace("--", "/"), folder.name
    meta_dir = folder / ".cache" / "huggingface" / "download"
    if meta_dir.is_dir():
        for meta in sorted(meta_dir.glob("*.metadata")):
            try:
                commit = meta.read_text(encoding="utf-8").splitlines()[0].strip()
            except (OSError, IndexError, UnicodeDecodeError):
                continue
            if len(commit) == 40 and all(c in "0123456789abcdef" for c in commit):
                return None, commit
    return None, None


def _hub_json(repo_id: str, filename: str, hub: _HubAccess) -> tuple[dict[str, Any], str | None, Path] | None:
    """Fetch and parse one JSON file of a hub repo; None if the repo has no such file (or it is not cached)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    local_only = hub.local_only()
    try:
        file = Path(hf_hub_download(repo_id, filename, local_files_only=local_only))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        if not local_only:
            raise ModelLoadError(
                f"Could not download {filename} of model {repo_id!r} from the Hugging Face Hub and it is not in "
                f"the local cache. {_how_to_fix(repo_id)}"
            ) from None
        return None
    except EntryNotFoundError:
        return None
    except GatedRepoError:
        raise ModelLoadError(
            f"Model {repo_id!r} is gated on the Hugging Face Hub: accept its terms on huggingface.co and log in "
            f"(`hf auth login` or HF_TOKEN). {_how_to_fix(repo_id)}"
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise ModelLoadError(
            f"Model {repo_id!r} was not found on the Hugging Face Hub (typo, or a private repo without a token?). "
            f"{_how_to_fix(repo_id)}"
        ) from None
    except Exception as exc:  # network errors of the HTTP client, permission errors in the cache, ...
        raise ModelLoadError(
            f"Could not fetch {filename} of model {repo_id!r}: {exc}. {_how_to_fix(repo_id)}"
        ) from exc
    revision = file.parent.name if file.parent.parent.name == "snapshots" else None
    return _read_json(file), revision, file.parent


@dataclass(frozen=True)
class _Resolved:
    """Result of :func:`_resolve_config`."""

    model_id: str
    config: dict[str, Any]
    config_origin: str
    base_model: str | None
    revision: str | None
    fingerprint: str | None = None
    hub_id: str | None = None
    folder: Path | None = None


def _resolve_config(model: str | Path, hub: _HubAccess, *, seen: tuple[str, ...] = ()) -> _Resolved:
    """Find the ``config.json`` of a local folder or hub id, following PEFT adapters to their base model."""
    name = str(model)
    if not name.strip():
        raise ModelLoadError(f"Empty model name. {_how_to_fix(DEFAULT_MODEL)}")
    if name in seen:
        raise ModelLoadError(f"PEFT adapter {seen[-1]!r} has a circular base_model_name_or_path ({name!r}).")
    local = Path(name).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelLoadError(f"Model path {str(local)!r} is a file; pass the checkpoint folder.")
        folder = str(local.resolve())
        config_file, adapter_file = local / "config.json", local / "adapter_config.json"
        fingerprint = fingerprint_folder(local)
        hub_id, revision = hub_origin(local)
        where = dict(fingerprint=fingerprint, hub_id=hub_id, folder=Path(folder))
        if config_file.is_file():
            return _Resolved(folder, _read_json(config_file), str(config_file), None, revision, **where)
        if adapter_file.is_file():
            base = _adapter_base(_read_json(adapter_file), str(adapter_file))
            inner = _resolve_config(base, hub, seen=(*seen, name))
            return _Resolved(folder, inner.config, inner.config_origin, base, revision, **where)
        raise ModelLoadError(
            f"Model folder {folder!r} has neither config.json nor adapter_config.json: not a checkpoint. "
            f"{_how_to_fix(name)}"
        )
    if looks_like_path(model):
        raise ModelLoadError(f"Model folder {str(local)!r} does not exist. {_how_to_fix(name)}")

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        raise ModelLoadError(
            f"Model {name!r} is neither an existing local folder nor a valid Hugging Face Hub id ({exc}). "
            f"{_how_to_fix(name)}"
        ) from None
    found = _hub_json(name, "config.json", hub)
    if found is not None:
        return _Resolved(name, found[0], f"{name}/config.json", None, found[1], hub_id=name, folder=found[2])
    adapter = _hub_json(name, "adapter_config.json", hub)
    if adapter is not None:
        base = _adapter_base(adapter[0], f"{name}/adapter_config.json")
        inner = _resolve_config(base, hub, seen=(*seen, name))
        return _Resolved(name, inner.config, inner.config_origin, base, adapter[1], hub_id=name, folder=adapter[2])
    where = "in the local Hugging Face cache (offline)" if hub.local_only() else "on the Hugging Face Hub"
    raise ModelLoadError(
        f"Model {name!r} was not found {where}: no config.json or adapter_config.json. {_how_to_fix(name)}"
    )


def _adapter_base(adapter_config: Mapping[str, Any], origin: str) -> str:
    base = adapter_config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ModelLoadError(f"{origin} has no base_model_name_or_path; cannot tell which model it adapts.")
    return base


def _inspect_checkpoint(model: str | Path, local_files_only: bool | None) -> _Checkpoint:
    """Locate a checkpoint and read its config without loading weights or processors."""
    hub = _HubAccess(local_files_only)
    found = _resolve_config(model, hub)
    # A self-contained local folder never needs the Hub: load it with local_files_only unless told otherwise.
    lfo = hub.local_only() if hub.used else (True if local_files_only is None else local_files_only)
    return _Checkpoint(
        model_id=found.model_id,
        config=found.config,
        config_origin=found.config_origin,
        base_model=found.base_model,
        revision=found.revision,
        local_files_only=lfo,
        fingerprint=found.fingerprint,
        hub_id=found.hub_id,
        folder=found.folder,
    )


def detect_family(model: str | Path, *, local_files_only: bool | None = None) -> str:
    """Return the family name (one of :data:`SUPPORTED_FAMILIES`) of a local folder or hub id.

    Reads ``config.json`` (``architectures``, then ``model_type``); for a PEFT adapter,
    ``adapter_config.json`` -> ``base_model_name_or_path`` -> that model's ``config.json``.
    Raises :class:`ModelLoadError` when the checkpoint cannot be found or the family is unknown.
    """
    ckpt = _inspect_checkpoint(model, local_files_only)
    return _family_from_config(ckpt.config, ckpt.config_origin)

