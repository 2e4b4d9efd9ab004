"""ColPaliEncoder: ColPali-family late-interaction models loaded with colpali-engine.

It implements :class:`~docpc_retrievers.encoders.protocol.Encoder`: float32
``[n_vectors, dim]`` arrays per image or query with padding rows removed,
plus the visual-token geometry evidence maps need. Heavy imports (torch,
transformers, colpali-engine: about 7 s) happen only when one is built.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from PIL import Image

from docpc_retrievers.errors import DocPCError, ModelLoadError
from docpc_retrievers.machine.cpu import this_cpu

if TYPE_CHECKING:
    import torch

from docpc_retrievers.encoders.batches import feed
from docpc_retrievers.encoders.compiled import CompiledBlocks, compile_after
from docpc_retrievers.encoders.checkpoints import _Checkpoint, _how_to_fix, _inspect_checkpoint
from docpc_retrievers.encoders.families import _FAMILIES, DEFAULT_MODEL, _Family, _family_from_config, _normalise_family
from docpc_retrievers.encoders.identity import ModelIdentity
from docpc_retrievers.encoders.protocol import EncodedImage, Encoder

logger = logging.getLogger(__name__)

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


def pick_device(device: str | None) -> str:
    """The device to run on: ``device`` if it is usable, else cuda, else mps, else cpu."""
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


def pick_dtype(dtype: torch.dtype | str | None, device: str) -> torch.dtype:
    """The torch dtype for ``dtype`` (name, alias or dtype). None gives bfloat16 on cuda and on a CPU that multiplies
    bfloat16 in hardware (AVX-512 BF16, AMX, Arm BF16: ColQwen2's 2B architecture ran 1.6x faster per grid and 3x
    per query there, benchmarks/cpu_dtype_bench.py), float32 on other CPUs (bfloat16 is emulated there) and mps."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        # bf16 is the models' dtype on GPUs. fp16 can overflow in these models' activations (NaN rows) and
        # bf16 on mps depends on the macOS/torch version, so mps gets the safe choice: fp32.
        if device.startswith("cuda") or (device == "cpu" and this_cpu().native_bfloat16):
            return torch.bfloat16
        return torch.float32
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    name = aliases.get(dtype.lower(), dtype.lower()).removeprefix("torch.")
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"Invalid dtype {dtype!r}; use bfloat16, float16 or float32.")
    return value


_T = TypeVar("_T")
_R = TypeVar("_R")


def default_batch_size(device: str) -> int:
    """Images a forward pass when none is asked for: 4 on a CPU, 8 on a GPU.

    On an H200 (ColQwen2, 768 visual tokens) encoding ran at 30.5 / 36.0 / 37.8 / 39.0 images/s at batches of 4 / 8
    / 16 / 32 (benchmarks/results/2026-11-28-gpu-h200-indexing-pipeline.md); 8 takes most of that gain for a quarter
    of batch 32's activations (an H100 peaked at 26.6 GiB at 32), leaving room on smaller GPUs.
    """
    return 4 if device == "cpu" else 8


class ColPaliEncoder:
    """Late-interaction encoder for ColPali-family checkpoints, loaded with colpali-engine.

    ``model``: hub id or local folder (full checkpoint or PEFT adapter). ``family``: one of
    :data:`SUPPORTED_FAMILIES`, detected from the checkpoint's config when None.
    ``device``: cuda, else mps, else cpu. ``dtype``: bfloat16 on cuda and on CPUs with native bfloat16, float32 elsewhere
    (:func:`pick_dtype`).
    ``max_num_visual_tokens``: cap on visual tokens per image for dynamic-resolution (Qwen)
    families (sets the image processor's max pixels to ``N * tile**2``, tile = 28 px for
    ColQwen2/2.5); other families use fixed or tiled resolutions and raise ``ValueError``.
    ``mask_non_image_embeddings``: keep only visual-token rows of image embeddings
    (prompt-token rows are dropped, not stored as zero vectors).
    ``local_files_only``: None = automatic (True under HF_HUB_OFFLINE or when the Hub is unreachable).
    ``batch_size``: images a forward pass; None: :func:`default_batch_size` (4 on a CPU, 8 on a GPU).
    On CUDA the image processor runs on the GPU (``processes_on_device``) and a process that has encoded 5,000
    images compiles the model's repeated blocks (``compiled``; encoders/compiled.py says when and why).
    """

    def __init__(
        self,
        model: str | Path = DEFAULT_MODEL,
        *,
        family: str | None = None,
        device: str | None = None,
        dtype: torch.dtype | str | None = None,
        batch_size: int | None = None,
        max_num_visual_tokens: int | None = None,
        mask_non_image_embeddings: bool = False,
        local_files_only: bool | None = None,
        prefetch: bool | None = None,
    ) -> None:
        if batch_size is not None and batch_size < 1:
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
        self.device: str = pick_device(device)
        self.dtype: torch.dtype = pick_dtype(dtype, self.device)
        self.batch_size: int = batch_size if batch_size is not None else default_batch_size(self.device)
        self.mask_non_image_embeddings: bool = mask_non_image_embeddings
        # Batch n+1 prepared (resized, normalised, tokenised; cast and pinned on CUDA) while batch n runs: the device
        # does not wait for the processor (encoders/batches.py). Off on CPU unless asked: both share the same cores.
        self.prefetch: bool = self.device != "cpu" if prefetch is None else bool(prefetch)
        self._family = fam
        self._checkpoint = ckpt
        self._identity: ModelIdentity | None = None
        # One forward pass at a time: threads sharing the encoder (a server's requests) would each take every core.
        self._forward_lock = threading.Lock()

        started = time.perf_counter()
        self._model, self._processor = self._load(fam, ckpt)
        if max_num_visual_tokens is not None:
            self.set_max_visual_tokens(max_num_visual_tokens)
        self.dim: int = int(getattr(self._model, "dim", 0) or 0)
        if self.dim <= 0:
            raise ModelLoadError(f"Loaded model {self.model_id!r} does not expose its embedding dim.")
        self._image_token_id = self._find_image_token_id()
        self.processes_on_device: bool = _process_images_on(self._processor, self.device)
        self.compiled = CompiledBlocks(self._model, compile_after(self.device))
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
            with _quiet_local_load(ckpt.model_id):
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

    def set_max_visual_tokens(self, n: int) -> None:
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
        """True when :meth:`image_patch_grid` and ``EncodedImage.patch_grid`` are available: Qwen families (a grid
        that follows the image's shape) and ColPali (a fixed square grid over the image resized to a square)."""
        return self._family.dynamic_resolution or self._square_side() is not None

    def _square_side(self) -> int | None:
        """Tokens per side of a square-grid family's image (PaliGemma: 448 px / 14 = 32), from the processor's
        ``image_seq_length``; None for other families or a length that is not a square."""
        if not self._family.square_grid:
            return None
        length = int(getattr(self._processor, "image_seq_length", 0) or 0)
        side = math.isqrt(length)
        return side if side > 0 and side * side == length else None

    def settings(self) -> dict[str, Any]:
        """JSON-safe dict of everything that changes the embedding (stores refuse to mix differing ones).

        Device and dtype are deliberately absent: they change values only within rounding, and
        indexing on a GPU then querying on a CPU is a supported workflow.
        """
        return {
            **self.identity.to_settings(),
            "dim": self.dim,
            "max_num_visual_tokens": self.max_num_visual_tokens,
            "mask_non_image_embeddings": self.mask_non_image_embeddings,
        }

    @property
    def identity(self) -> ModelIdentity:
        """Which model this is, by content (fingerprint, hub commit), with its hub id and folder as hints."""
        if self._identity is None:
            self._identity = self._checkpoint.identity(self.family)
        return self._identity

    def image_patch_grid(self, image_size: tuple[int, int]) -> tuple[int, int]:
        """(rows, cols) of merged visual tokens the processor makes for an image of PIL size (width, height).

        Qwen families: the processor's own resize logic (colpali-engine ``get_n_patches``), so it honours
        ``max_num_visual_tokens``. ColPali: the same square grid for every image (it is stretched to a square).
        """
        width, height = (int(v) for v in image_size)
        if width < 1 or height < 1:
            raise ValueError(f"image_size must be positive (width, height), got {image_size}")
        side = self._square_side()
        if side is not None:
            return side, side
        if not self._family.dynamic_resolution:
            raise NotImplementedError(
                f"image_patch_grid is only available for dynamic-resolution (Qwen) families and ColPali, not "
                f"{self.family}."
            )
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
        # Batch similar sizes together (less pixel padding), then restore input order.
        order = self._check_and_order(images)
        encoded = self._run_batches(
            [images[i] for i in order], self._processor.process_images, self._split_images, batch_size, images=True
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

    def query_tokens(self, query: str) -> list[tuple[str, bool]]:
        """Each row :meth:`encode_queries` returns for ``query``: its token text and whether it is one of the
        query's own words (False for the prompt, special and augmentation tokens colpali-engine adds)."""
        batch = self._processor.process_queries([query])
        ids = batch["input_ids"][0].to("cpu").numpy()[self._keep_rows(batch, 0)].tolist()
        tokenizer = self._processor.tokenizer
        own = tokenizer(query, add_special_tokens=False)["input_ids"]
        words = [False] * len(ids)
        for start in range(len(ids) - len(own) + 1):  # the query's own tokens, as one run
            if own and ids[start : start + len(own)] == own:
                words[start : start + len(own)] = [True] * len(own)
                break
        else:
            special = set(tokenizer.all_special_ids)
            words = [i not in special for i in ids]
        return [(tokenizer.decode([i]), w) for i, w in zip(ids, words)]

    def encode_image_groups(
        self,
        groups: Iterable[Sequence[Image.Image]],
        *,
        on_span: Callable[[str, float, float], None] | None = None,
    ) -> Iterator[list[EncodedImage]]:
        """Encode a stream of image groups, yielding each group's :meth:`encode_images_with_info` in turn.

        Each group is batched exactly as :meth:`encode_images_with_info` batches it (so its vectors are the same,
        bit for bit), but the next batch is prepared while this one runs even across groups, and ``groups`` may
        block until the caller has more: the indexer's encoding thread feeds it rendered documents as they come,
        and the device goes from one group to the next without waiting for the caller. ``on_span(stage, start,
        end)`` hears each batch's ``prepare`` and ``forward`` (forward pass and copy back) times.
        """
        size = self.batch_size
        tags: deque[tuple[int, list[int], bool]] = deque()  # per batch: group size, positions, last of its group

        def batches() -> Iterator[list[Image.Image]]:
            for group in groups:
                images = list(group)
                order = self._check_and_order(images)
                for start in range(0, len(images), size):
                    positions = order[start : start + size]
                    tags.append((len(images), positions, start + size >= len(images)))
                    yield [images[i] for i in positions]

        results: list[EncodedImage | None] = []
        for encoded in self._batch_stream(batches(), self._processor.process_images, self._split_images, True, on_span):
            count, positions, last = tags.popleft()
            if not results:
                results = [None] * count
            for position, item in zip(positions, encoded):
                results[position] = item
            if last:
                yield [item for item in results if item is not None]
                results = []

    def _check_and_order(self, images: Sequence[Image.Image]) -> list[int]:
        """Refuse what is not an image; the positions sorted by pixel area (batching similar sizes pads less)."""
        for i, image in enumerate(images):
            if not isinstance(image, Image.Image):
                raise TypeError(f"images[{i}] is {type(image).__name__}, expected a PIL.Image.Image")
        return sorted(range(len(images)), key=lambda i: images[i].size[0] * images[i].size[1])

    def _run_batches(
        self,
        items: list[_T],
        process: Callable[[list[_T]], Any],
        split: Callable[[Any, np.ndarray], list[_R]],
        batch_size: int | None,
        *,
        images: bool = False,
    ) -> list[_R]:
        """Process, forward and split ``items`` in batches under ``torch.inference_mode``."""
        size = self.batch_size if batch_size is None else batch_size
        if size < 1:
            raise ValueError(f"batch_size must be >= 1, got {size}")
        batches = [items[s : s + size] for s in range(0, len(items), size)]
        return [item for part in self._batch_stream(batches, process, split, images, None) for item in part]

    def _batch_stream(
        self,
        batches: Iterable[list[_T]],
        process: Callable[[list[_T]], Any],
        split: Callable[[Any, np.ndarray], list[_R]],
        images: bool,
        on_span: Callable[[str, float, float], None] | None,
    ) -> Iterator[list[_R]]:
        """Each batch processed (the next one ahead, encoders/batches.py), forwarded and split, in order."""
        torch = self._torch
        for batch, inputs in feed(batches, process, device=self.device, dtype=self.dtype, ahead=self.prefetch,
                                  on_span=on_span):
            started = time.perf_counter()
            count = _batch_count(inputs)
            with self._forward_lock, torch.inference_mode():
                embeddings = self._forward(inputs, count if images else 0)
            array = embeddings.to(dtype=torch.float32, device="cpu").numpy()
            if on_span is not None:
                on_span("forward", started, time.perf_counter())
            yield split(batch, array)

    def _forward(self, inputs: dict[str, Any], images: int) -> Any:
        """One forward pass; image batches through the compiled blocks once a run is long enough (compiled.py)."""
        compiled = False
        try:
            with self.compiled.around(images) as compiled:
                return self._model(**inputs)
        except Exception as exc:
            if not compiled:
                raise
            self.compiled.failed(exc)
        return self._model(**inputs)

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
            elif (side := self._square_side()) is not None:
                patch_grid = (side, side)
            items.append(EncodedImage(embeddings=embeddings, visual_mask=visual[keep].copy(), patch_grid=patch_grid))
        return items

    def _split_queries(self, batch: Any, array: np.ndarray) -> list[np.ndarray]:
        return [
            _finite_or_raise(np.ascontiguousarray(array[i][self._keep_rows(batch, i)]), self.model_id)
            for i in range(array.shape[0])
        ]


def _batch_count(inputs: dict[str, Any]) -> int:
    """How many items a batch of model inputs holds (the rows of its token ids)."""
    ids = inputs.get("input_ids")
    return int(ids.shape[0]) if ids is not None else 0


def _finite_or_raise(embeddings: np.ndarray, model_id: str) -> np.ndarray:
    """Refuse NaN/inf embeddings (e.g. float16 overflow): they would poison every MaxSim score."""
    if not np.isfinite(embeddings).all():
        raise DocPCError(
            f"Model {model_id!r} produced non-finite embeddings; try dtype='float32' (or bfloat16 on GPU)."
        )
    return embeddings.astype(np.float32, copy=False)


def _process_images_on(processor: Any, device: str) -> bool:
    """Let the image processor resize and normalise on ``device`` when that is a GPU and the processor can (the
    torchvision processors of transformers 5 take ``device``): on an H100 a 2x2 grid took 2.8 ms there against
    14.2 ms on one CPU thread, and its pixels (about 14 MB a grid in float32) need no copy. True when set."""
    image_processor = getattr(processor, "image_processor", None)
    names = getattr(image_processor, "_valid_kwargs_names", None) or []
    if not device.startswith("cuda") or "device" not in names:
        return False
    image_processor.device = device  # the default of the processor's ``device`` argument for every call
    return True


def load_encoder(model: str | Path = DEFAULT_MODEL, **kwargs: Any) -> Encoder:
    """Build the encoder for ``model`` (currently always a :class:`ColPaliEncoder`)."""
    return ColPaliEncoder(model, **kwargs)


@contextlib.contextmanager
def _quiet_local_load(model_id: Any) -> Iterator[None]:
    """No "Loading weights" bar for a checkpoint already in a local folder (every open drew one); a download from
    a hub keeps its bars, which say how long it will take."""
    from transformers.utils import logging as hf_logging

    if not Path(str(model_id)).expanduser().is_dir() or not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()
