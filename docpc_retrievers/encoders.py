"""Multi-vector encoders: ColPali-family late-interaction models loaded with colpali-engine.

Why this module exists: every other part of docpc-retrievers (indexing, search,
the store's "same model?" check, mapping grid tokens back to grid cells) needs
the same few things from a model: a list of float32 ``[n_vectors, dim]`` arrays
per image or query, with padding rows removed, and a JSON-safe description of
everything that changes the embedding. :class:`Encoder` is that contract;
:class:`ColPaliEncoder` implements it for the checkpoints colpali-engine can
load.

Heavy imports (torch, transformers, colpali-engine: about 7 s) happen only
when an encoder is built, so importing this module, the :class:`Encoder`
protocol or :func:`detect_family` stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np
from PIL import Image

from docpc_retrievers.errors import DocPCError, ModelLoadError

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_MODEL",
    "SUPPORTED_FAMILIES",
    "ColPaliEncoder",
    "EncodedImage",
    "Encoder",
    "detect_family",
    "import_colpali_models",
    "load_encoder",
]

logger = logging.getLogger(__name__)

#: Checkpoint used when none is given.
DEFAULT_MODEL = "vidore/colqwen2-v1.0"

#: Seconds allowed for the one HEAD request that checks whether the Hub is reachable.
_HUB_PROBE_TIMEOUT_S = 3.0

#: Local weight/config files at or below this size are hashed whole for the fingerprint.
_FULL_HASH_LIMIT = 64 * 1024 * 1024
_SAMPLE_BYTES = 1024 * 1024
_FINGERPRINT_SUFFIXES = frozenset(
    {".json", ".safetensors", ".bin", ".pt", ".pth", ".model", ".txt", ".tiktoken", ".jinja"}
)


# --------------------------------------------------------------------------- families


@dataclass(frozen=True)
class _Family:
    """How one colpali-engine model family is recognised and loaded."""

    name: str
    model_class: str
    processor_class: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    dynamic_resolution: bool  # Qwen-style: max_pixels, image_grid_thw, row-major merged patch grid


_FAMILIES: dict[str, _Family] = {
    f.name: f
    for f in (
        _Family("colqwen2", "ColQwen2", "ColQwen2Processor", ("qwen2_vl",), ("ColQwen2",), True),
        _Family("colqwen2_5", "ColQwen2_5", "ColQwen2_5_Processor", ("qwen2_5_vl",), ("ColQwen2_5",), True),
        _Family("colqwen3", "ColQwen3", "ColQwen3Processor", ("qwen3_vl",), ("ColQwen3",), True),
        _Family("colqwen3_5", "ColQwen3_5", "ColQwen3_5Processor", ("qwen3_5",), ("ColQwen3_5",), True),
        _Family("colpali", "ColPali", "ColPaliProcessor", ("paligemma",), ("ColPali",), False),
        _Family("colidefics3", "ColIdefics3", "ColIdefics3Processor", ("idefics3",), ("ColIdefics3",), False),
        _Family(
            "colmodernvbert", "ColModernVBert", "ColModernVBertProcessor", ("modernvbert",), ("ColModernVBert",), False
        ),
        _Family("colgemma3", "ColGemma3", "ColGemmaProcessor3", ("gemma3",), ("ColGemma3",), False),
    )
}

#: Family names accepted by ``family=`` and returned by :func:`detect_family`.
SUPPORTED_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)

_FAMILY_ALIASES: dict[str, str] = {
    "colsmol": "colidefics3",
    "colgemma": "colgemma3",
    "colgemmaprocessor3": "colgemma3",
}

# colpali-engine single-vector ("Bi") models: not late-interaction, not supported here.
_SINGLE_VECTOR_ARCHS = frozenset(
    {"BiQwen2", "BiQwen2_5", "BiQwen3", "BiQwen3_5", "BiPali", "BiPaliProj", "BiIdefics3", "BiModernVBert", "BiGemma3"}
)
# transformers-native retrieval ports (the "-hf" checkpoints): different weights layout and classes.
_TRANSFORMERS_NATIVE_TYPES = frozenset({"colpali", "colqwen2", "colmodernvbert"})


def _normalise_family(family: str) -> str:
    """Map user spellings (``ColQwen2.5``, ``colqwen2-5``, ``colsmol``) to a family name."""
    key = family.strip().lower().replace(".", "_").replace("-", "_")
    key = _FAMILY_ALIASES.get(key, key)
    if key.endswith("_processor"):
        key = key[: -len("_processor")]
    if key not in _FAMILIES:
        raise ModelLoadError(
            f"Unknown model family {family!r}. Supported families: {', '.join(SUPPORTED_FAMILIES)}."
        )
    return key


def _family_from_config(config: Mapping[str, Any], origin: str) -> str:
    """Pick the family from a ``config.json`` dict: ``architectures`` first, then ``model_type``."""
    architectures = [str(a) for a in (config.get("architectures") or [])]
    for arch in architectures:
        for fam in _FAMILIES.values():
            if arch in fam.architectures:
                return fam.name
    for arch in architectures:
        if arch in _SINGLE_VECTOR_ARCHS:
            raise ModelLoadError(
                f"{origin} is a single-vector colpali-engine model ({arch}); docpc-retrievers needs a "
                f"multi-vector (late-interaction) model. Supported families: {', '.join(SUPPORTED_FAMILIES)}."
            )
    model_type = str(config.get("model_type") or "")
    if model_type in _TRANSFORMERS_NATIVE_TYPES or any(a.endswith("ForRetrieval") for a in architectures):
        raise ModelLoadError(
            f"{origin} is a transformers-native retrieval checkpoint (model_type {model_type!r}, "
            f"architectures {architectures}); docpc-retrievers loads colpali-engine checkpoints. Use the "
            f"checkpoint without the '-hf' suffix (e.g. {DEFAULT_MODEL!r} instead of '{DEFAULT_MODEL}-hf')."
        )
    for fam in _FAMILIES.values():
        if model_type in fam.model_types:
            return fam.name
    raise ModelLoadError(
        f"Cannot tell which ColPali-family model {origin} is (model_type {model_type or None!r}, "
        f"architectures {architectures}). Supported families: {', '.join(SUPPORTED_FAMILIES)}; "
        "pass family=... if the checkpoint is one of them."
    )


# --------------------------------------------------------------------------- checkpoint lookup


@dataclass(frozen=True)
class _Checkpoint:
    """What was found about a checkpoint before loading it."""

    model_id: str  # hub id as given, or resolved local folder; what from_pretrained gets
    config: dict[str, Any]  # config.json of the model (of the base model for a PEFT adapter)
    config_origin: str
    base_model: str | None  # PEFT adapter's base_model_name_or_path
    revision: str | None  # hub commit hash or "sha256:..." content fingerprint of a local folder
    local_files_only: bool


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


def _how_to_fix(model: str) -> str:
    hub_id = model if not _looks_like_path(model) and model.count("/") == 1 else DEFAULT_MODEL
    return (
        "To use a local copy: on a machine with internet access run "
        f"`hf download {hub_id} --local-dir DIR` (older huggingface_hub: `huggingface-cli download ...`), "
        "copy DIR here and pass it as the model (`--model DIR`, or ColPaliEncoder('DIR')); or populate the "
        "Hugging Face cache (HF_HOME) and set HF_HUB_OFFLINE=1. A PEFT adapter also needs its base model "
        "(adapter_config.json 'base_model_name_or_path') available the same way."
    )


def _looks_like_path(model: str | Path) -> bool:
    """Path-like names are never sent to the Hub (hub ids are ``name`` or ``org/name``)."""
    if isinstance(model, Path):
        return True
    return (
        model.startswith(("/", ".", "~"))
        or "\\" in model
        or model.count("/") > 1
        or (len(model) > 1 and model[1] == ":")
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object.")
    return data


def _fingerprint_folder(folder: Path) -> str:
    """Cheap content fingerprint of a local checkpoint (configs, tokenizer, weights; big files sampled)."""
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


def _hub_json(repo_id: str, filename: str, hub: _HubAccess) -> tuple[dict[str, Any], str | None] | None:
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
    return _read_json(file), revision


@dataclass(frozen=True)
class _Resolved:
    """Result of :func:`_resolve_config`."""

    model_id: str
    config: dict[str, Any]
    config_origin: str
    base_model: str | None
    revision: str | None


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
        revision: str | None = _fingerprint_folder(local)
        if config_file.is_file():
            return _Resolved(folder, _read_json(config_file), str(config_file), None, revision)
        if adapter_file.is_file():
            base = _adapter_base(_read_json(adapter_file), str(adapter_file))
            inner = _resolve_config(base, hub, seen=(*seen, name))
            return _Resolved(folder, inner.config, inner.config_origin, base, revision)
        raise ModelLoadError(
            f"Model folder {folder!r} has neither config.json nor adapter_config.json: not a checkpoint. "
            f"{_how_to_fix(name)}"
        )
    if _looks_like_path(model):
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
        return _Resolved(name, found[0], f"{name}/config.json", None, found[1])
    adapter = _hub_json(name, "adapter_config.json", hub)
    if adapter is not None:
        base = _adapter_base(adapter[0], f"{name}/adapter_config.json")
        inner = _resolve_config(base, hub, seen=(*seen, name))
        return _Resolved(name, inner.config, inner.config_origin, base, adapter[1])
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
    )


def detect_family(model: str | Path, *, local_files_only: bool | None = None) -> str:
    """Return the family name (one of :data:`SUPPORTED_FAMILIES`) of a local folder or hub id.

    Reads ``config.json`` (``architectures``, then ``model_type``); for a PEFT adapter,
    ``adapter_config.json`` -> ``base_model_name_or_path`` -> that model's ``config.json``.
    Raises :class:`ModelLoadError` when the checkpoint cannot be found or the family is unknown.
    """
    ckpt = _inspect_checkpoint(model, local_files_only)
    return _family_from_config(ckpt.config, ckpt.config_origin)


# --------------------------------------------------------------------------- protocol


@runtime_checkable
class Encoder(Protocol):
    """What the rest of docpc-retrievers needs from a multi-vector encoder.

    Every returned array is float32 ``[n_vectors_i, dim]``, one per input in input order,
    with padding rows removed. ``settings()`` is a JSON-safe dict of everything that
    changes the embedding; stores record it and refuse to mix encoders.
    """

    model_id: str
    dim: int

    def encode_images(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[np.ndarray]:
        """Encode page/grid images into one multi-vector array each."""
        ...

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[np.ndarray]:
        """Encode text queries into one multi-vector array each."""
        ...

    def settings(self) -> dict[str, Any]:
        """JSON-safe description of everything that changes the embedding."""
        ...


@dataclass(frozen=True, eq=False)
class EncodedImage:
    """One encoded image with token bookkeeping, for mapping vectors back to image regions.

    ``embeddings``: float32 ``[n, dim]`` (padding removed; the same rows ``encode_images`` returns).
    ``visual_mask``: bool ``[n]``, True where the row is an image (visual) token.
    ``patch_grid``: ``(rows, cols)`` of merged visual tokens for dynamic-resolution (Qwen) families,
    else None. The visual rows, in order, are that grid in row-major order:
    ``embeddings[visual_mask].reshape(rows, cols, dim)``.
    """

    embeddings: np.ndarray
    visual_mask: np.ndarray
    patch_grid: tuple[int, int] | None


# --------------------------------------------------------------------------- ColPaliEncoder


def import_colpali_models() -> ModuleType:
    """Import ``colpali_engine.models`` without its side effect on logging.

    colpali-engine 0.3.18 calls ``logging.info(...)`` at import when fast-plaid is missing,
    which runs ``logging.basicConfig()`` and leaves a handler on the root logger: any later
    ``logging.basicConfig(...)`` of the application would then silently do nothing. If the
    root logger had no handlers before, the ones the import added are removed again.
    """
    root = logging.getLogger()
    had_handlers = bool(root.handlers)
    import colpali_engine.models as models

    if not had_handlers:
        for handler in list(root.handlers):
            root.removeHandler(handler)
    return models


def _pick_device(device: str | None) -> str:
    import torch

    if device is not None:
        try:
            kind = torch.device(device).type
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"Invalid device {device!r}: {exc}") from None
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"Device {device!r} requested but CUDA is not available in this torch build/machine.")
        if kind == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"Device {device!r} requested but MPS is not available.")
        return device
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def _pick_dtype(dtype: torch.dtype | str | None, device: str) -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        # bf16 is the models' dtype on GPUs. fp16 can overflow in these models' activations (NaN rows) and
        # bf16 on mps depends on the macOS/torch version, so mps gets the safe choice: fp32.
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    name = aliases.get(dtype.lower(), dtype.lower()).removeprefix("torch.")
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"Invalid dtype {dtype!r}; use bfloat16, float16 or float32.")
    return value


_T = TypeVar("_T")
_R = TypeVar("_R")


class ColPaliEncoder:
    """Late-interaction encoder for ColPali-family checkpoints, loaded with colpali-engine.

    ``model``: hub id or local folder (full checkpoint or PEFT adapter). ``family``: one of
    :data:`SUPPORTED_FAMILIES`, detected from the checkpoint's config when None.
    ``device``: cuda, else mps, else cpu. ``dtype``: bfloat16 on cuda, float32 elsewhere.
    ``max_num_visual_tokens``: cap on visual tokens per image for dynamic-resolution (Qwen)
    families (sets the image processor's max pixels to ``N * tile**2``, tile = 28 px for
    ColQwen2/2.5); other families use fixed or tiled resolutions and raise ``ValueError``.
    ``mask_non_image_embeddings``: keep only visual-token rows of image embeddings
    (prompt-token rows are dropped, not stored as zero vectors).
    ``local_files_only``: None = automatic (True under HF_HUB_OFFLINE or when the Hub is unreachable).
    """

    def __init__(
        self,
        model: str | Path = DEFAULT_MODEL,
        *,
        family: str | None = None,
        device: str | None = None,
        dtype: torch.dtype | str | None = None,
        batch_size: int = 4,
        max_num_visual_tokens: int | None = None,
        mask_non_image_embeddings: bool = False,
        local_files_only: bool | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_num_visual_tokens is not None and max_num_visual_tokens < 1:
            raise ValueError(f"max_num_visual_tokens must be >= 1, got {max_num_visual_tokens}")

        ckpt = _inspect_checkpoint(model, local_files_only)
        fam = _FAMILIES[_normalise_family(family) if family else _family_from_config(ckpt.config, ckpt.config_origin)]
        if max_num_visual_tokens is not None and not fam.dynamic_resolution:
            raise ValueError(
                f"max_num_visual_tokens is only supported for dynamic-resolution (Qwen) families "
                f"({', '.join(f.name for f in _FAMILIES.values() if f.dynamic_resolution)}); "
                f"{fam.name} uses a fixed or tiled image resolution."
            )

        import torch

        self._torch = torch
        self.model_id: str = ckpt.model_id
        self.family: str = fam.name
        self.device: str = _pick_device(device)
        self.dtype: torch.dtype = _pick_dtype(dtype, self.device)
        self.batch_size: int = batch_size
        self.mask_non_image_embeddings: bool = mask_non_image_embeddings
        self._family = fam
        self._checkpoint = ckpt

        started = time.perf_counter()
        self._model, self._processor = self._load(fam, ckpt)
        if max_num_visual_tokens is not None:
            self._set_max_visual_tokens(max_num_visual_tokens)
        self.dim: int = int(getattr(self._model, "dim", 0) or 0)
        if self.dim <= 0:
            raise ModelLoadError(f"Loaded model {self.model_id!r} does not expose its embedding dim.")
        self._image_token_id = self._find_image_token_id()
        logger.info(
            "loaded %s (%s) on %s/%s, dim %d, in %.1f s",
            self.model_id,
            self.family,
            self.device,
            str(self.dtype).removeprefix("torch."),
            self.dim,
            time.perf_counter() - started,
        )

    # ----------------------------------------------------------------- loading

    def _load(self, fam: _Family, ckpt: _Checkpoint) -> tuple[Any, Any]:
        """Load model and processor through colpali-engine's ``from_pretrained``; wrap failures."""
        try:
            ce_models = import_colpali_models()
        except Exception as exc:
            raise ModelLoadError(f"Cannot import colpali-engine: {exc}") from exc
        model_cls = getattr(ce_models, fam.model_class, None)
        processor_cls = getattr(ce_models, fam.processor_class, None)
        if model_cls is None or processor_cls is None:
            raise ModelLoadError(
                f"This colpali-engine version has no {fam.model_class}/{fam.processor_class}; "
                "upgrade colpali-engine to use this checkpoint."
            )
        common: dict[str, Any] = {"local_files_only": ckpt.local_files_only}
        try:
            model = model_cls.from_pretrained(ckpt.model_id, dtype=self.dtype, device_map=self.device, **common)
            processor = processor_cls.from_pretrained(ckpt.model_id, **common)
        except ModelLoadError:
            raise
        except Exception as exc:  # OSError (missing files), ValueError (bad config), RuntimeError (OOM), ...
            raise ModelLoadError(
                f"Could not load {fam.name} checkpoint {ckpt.model_id!r}"
                + (f" (PEFT adapter on base {ckpt.base_model!r})" if ckpt.base_model else "")
                + f": {type(exc).__name__}: {exc}. {_how_to_fix(str(ckpt.model_id))}"
            ) from exc
        model.mask_non_image_embeddings = self.mask_non_image_embeddings
        model.eval()
        return model, processor

    def _set_max_visual_tokens(self, n: int) -> None:
        """Cap visual tokens per image: max_pixels = n * (patch_size * merge_size) ** 2."""
        image_processor = self._processor.image_processor
        tile = int(image_processor.patch_size) * int(image_processor.merge_size)
        min_pixels = int(image_processor.size["shortest_edge"])
        if n * tile * tile < min_pixels:
            raise ValueError(
                f"max_num_visual_tokens={n} is below this processor's minimum of "
                f"{-(-min_pixels // (tile * tile))} visual tokens per image."
            )
        # Only ``size``: transformers 5 reads it; setting the legacy ``max_pixels`` attribute (as
        # colpali-engine's own from_pretrained does) makes every processor call emit a FutureWarning.
        image_processor.size["longest_edge"] = n * tile * tile

    def _find_image_token_id(self) -> int | None:
        token_id = getattr(self._processor, "image_token_id", None)
        if token_id is None:
            token = getattr(self._processor, "image_token", None)
            if isinstance(token, str):
                token_id = self._processor.tokenizer.convert_tokens_to_ids(token)
        return int(token_id) if token_id is not None else None

    # ----------------------------------------------------------------- info

    @property
    def max_num_visual_tokens(self) -> int | None:
        """Effective cap on visual tokens per image (Qwen families), from the processor's max pixels."""
        if not self._family.dynamic_resolution:
            return None
        ip = self._processor.image_processor
        tile = int(ip.patch_size) * int(ip.merge_size)
        return int(ip.size["longest_edge"]) // (tile * tile)

    @property
    def model(self) -> Any:
        """The loaded colpali-engine model (a ``torch.nn.Module``), e.g. for fine-tuning; read-only attribute."""
        return self._model

    @property
    def processor(self) -> Any:
        """The loaded colpali-engine processor (``process_images`` / ``process_queries``); read-only attribute."""
        return self._processor

    @property
    def has_patch_grid(self) -> bool:
        """True when :meth:`image_patch_grid` and ``EncodedImage.patch_grid`` are available (Qwen families)."""
        return self._family.dynamic_resolution

    def settings(self) -> dict[str, Any]:
        """JSON-safe dict of everything that changes the embedding (stores refuse to mix differing ones).

        Device and dtype are deliberately absent: they change values only within rounding, and
        indexing on a GPU then querying on a CPU is a supported workflow.
        """
        return {
            "model_id": self.model_id,
            "family": self.family,
            "dim": self.dim,
            "max_num_visual_tokens": self.max_num_visual_tokens,
            "mask_non_image_embeddings": self.mask_non_image_embeddings,
            "revision": self._checkpoint.revision,
            "base_model": self._checkpoint.base_model,
        }

    def image_patch_grid(self, image_size: tuple[int, int]) -> tuple[int, int]:
        """(rows, cols) of merged visual tokens the processor makes for an image of PIL size (width, height).

        Uses the processor's own resize logic (colpali-engine ``get_n_patches``), so it honours
        ``max_num_visual_tokens``. Only for dynamic-resolution (Qwen) families.
        """
        if not self._family.dynamic_resolution:
            raise NotImplementedError(
                f"image_patch_grid is only available for dynamic-resolution (Qwen) families, not {self.family}."
            )
        width, height = (int(v) for v in image_size)
        if width < 1 or height < 1:
            raise ValueError(f"image_size must be positive (width, height), got {image_size}")
        merge = int(self._processor.image_processor.merge_size)
        cols, rows = self._processor.get_n_patches((width, height), spatial_merge_size=merge)
        return int(rows), int(cols)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model_id!r}, family={self.family!r}, device={self.device!r}, "
            f"dtype={str(self.dtype).removeprefix('torch.')}, dim={self.dim})"
        )

    # ----------------------------------------------------------------- encoding

    def encode_images(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[np.ndarray]:
        """Encode images; one float32 ``[n_vectors_i, dim]`` array per image, padding removed, input order."""
        return [item.embeddings for item in self.encode_images_with_info(images, batch_size=batch_size)]

    def encode_images_with_info(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[EncodedImage]:
        """Like :meth:`encode_images`, plus which rows are visual tokens and the (rows, cols) token grid."""
        for i, image in enumerate(images):
            if not isinstance(image, Image.Image):
                raise TypeError(f"images[{i}] is {type(image).__name__}, expected a PIL.Image.Image")
        # Batch similar sizes together (less pixel padding), then restore input order.
        order = sorted(range(len(images)), key=lambda i: images[i].size[0] * images[i].size[1])
        encoded = self._run_batches(
            [images[i] for i in order], self._processor.process_images, self._split_images, batch_size
        )
        result: list[EncodedImage | None] = [None] * len(images)
        for position, item in zip(order, encoded):
            result[position] = item
        return [item for item in result if item is not None]

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[np.ndarray]:
        """Encode queries (with colpali-engine's query augmentation tokens); float32 ``[n_tokens_i, dim]`` each."""
        if isinstance(queries, str):
            raise TypeError("encode_queries expects a sequence of strings, not a single string")
        for i, query in enumerate(queries):
            if not isinstance(query, str):
                raise TypeError(f"queries[{i}] is {type(query).__name__}, expected str")
        return self._run_batches(list(queries), self._processor.process_queries, self._split_queries, batch_size)

    def _run_batches(
        self,
        items: list[_T],
        process: Callable[[list[_T]], Any],
        split: Callable[[Any, np.ndarray], list[_R]],
        batch_size: int | None,
    ) -> list[_R]:
        """Process, forward and split ``items`` in batches under ``torch.inference_mode``."""
        torch = self._torch
        size = self.batch_size if batch_size is None else batch_size
        if size < 1:
            raise ValueError(f"batch_size must be >= 1, got {size}")
        out: list[_R] = []
        for start in range(0, len(items), size):
            batch = process(items[start : start + size])
            inputs = {
                key: (
                    value.to(self.device, dtype=self.dtype)
                    if value.is_floating_point()
                    else value.to(self.device)
                )
                if isinstance(value, torch.Tensor)
                else value
                for key, value in batch.items()
            }
            with torch.inference_mode():
                embeddings = self._model(**inputs)
            array = embeddings.to(dtype=torch.float32, device="cpu").numpy()
            out.extend(split(batch, array))
        return out

    def _keep_rows(self, batch: Any, index: int) -> np.ndarray:
        """Rows to keep for one sequence: attention mask (pad rows are zero or even NaN with sdpa)."""
        return batch["attention_mask"][index].to("cpu").numpy().astype(bool)

    def _split_images(self, batch: Any, array: np.ndarray) -> list[EncodedImage]:
        input_ids = batch["input_ids"].to("cpu").numpy()
        grid_thw = batch.get("image_grid_thw")
        merge = int(getattr(self._processor.image_processor, "merge_size", 1) or 1)
        items: list[EncodedImage] = []
        for i in range(array.shape[0]):
            keep = self._keep_rows(batch, i)
            visual = (
                input_ids[i] == self._image_token_id
                if self._image_token_id is not None
                else np.zeros_like(keep)
            )
            if self.mask_non_image_embeddings:
                keep &= visual
            embeddings = _finite_or_raise(np.ascontiguousarray(array[i][keep]), self.model_id)
            patch_grid: tuple[int, int] | None = None
            if self._family.dynamic_resolution and grid_thw is not None:
                _, h, w = (int(v) for v in grid_thw[i])
                patch_grid = (h // merge, w // merge)
            items.append(EncodedImage(embeddings=embeddings, visual_mask=visual[keep].copy(), patch_grid=patch_grid))
        return items

    def _split_queries(self, batch: Any, array: np.ndarray) -> list[np.ndarray]:
        return [
            _finite_or_raise(np.ascontiguousarray(array[i][self._keep_rows(batch, i)]), self.model_id)
            for i in range(array.shape[0])
        ]


def _finite_or_raise(embeddings: np.ndarray, model_id: str) -> np.ndarray:
    """Refuse NaN/inf embeddings (e.g. float16 overflow): they would poison every MaxSim score."""
    if not np.isfinite(embeddings).all():
        raise DocPCError(
            f"Model {model_id!r} produced non-finite embeddings; try dtype='float32' (or bfloat16 on GPU)."
        )
    return embeddings.astype(np.float32, copy=False)


def load_encoder(model: str | Path = DEFAULT_MODEL, **kwargs: Any) -> Encoder:
    """Build the encoder for ``model`` (currently always a :class:`ColPaliEncoder`)."""
    return ColPaliEncoder(model, **kwargs)
