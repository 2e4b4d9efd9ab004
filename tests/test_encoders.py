"""Tests of docpc_retrievers.encoders and the tiny test checkpoint (offline; no weights downloaded)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from docpc_retrievers import encoders
from docpc_retrievers.encoders import (
    DEFAULT_MODEL,
    SUPPORTED_FAMILIES,
    ColPaliEncoder,
    Encoder,
    detect_family,
    load_encoder,
)
from docpc_retrievers.errors import ModelLoadError
from docpc_retrievers.testing import build_tiny_colqwen2
from docpc_retrievers.testing.tiny_checkpoint import main as tiny_checkpoint_main

# Sizes chosen so that batching pads both the token sequences and the pixel sequences.
MIXED_SIZES = [(300, 400), (800, 200), (100, 100), (640, 480), (37, 300)]
GRID_SIZE = (2048, 2648)  # a 2x2 grid of 1024x1324 pages


def _noise_image(size: tuple[int, int], seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    width, height = size
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def mixed_images() -> list[Image.Image]:
    return [_noise_image(size, seed) for seed, size in enumerate(MIXED_SIZES)]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any socket connection or DNS lookup fail at once."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("network access is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, no_network: None) -> Iterator[None]:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield


# --------------------------------------------------------------------------- tiny checkpoint


def test_tiny_checkpoint_is_deterministic_per_seed(tmp_path: Path) -> None:
    a = build_tiny_colqwen2(tmp_path / "a", seed=0)
    b = build_tiny_colqwen2(tmp_path / "b", seed=0)
    c = build_tiny_colqwen2(tmp_path / "c", seed=1)
    weights = [(p / "model.safetensors").read_bytes() for p in (a, b, c)]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]
    for name in ("config.json", "processor_config.json", "tokenizer.json"):
        assert (a / name).is_file()
    config = json.loads((a / "config.json").read_text())
    assert config["architectures"] == ["ColQwen2"]
    assert config["text_config"]["vocab_size"] <= 512


def test_tiny_checkpoint_command_line(tmp_path: Path) -> None:
    assert tiny_checkpoint_main([str(tmp_path / "cli"), "--seed", "3"]) == 0
    assert (tmp_path / "cli" / "model.safetensors").is_file()
    assert detect_family(tmp_path / "cli") == "colqwen2"


# --------------------------------------------------------------------------- encoding


def test_encoder_protocol_and_settings(tiny_encoder: ColPaliEncoder, tiny_checkpoint: Path) -> None:
    assert isinstance(tiny_encoder, Encoder)
    assert tiny_encoder.dim == 128
    settings = tiny_encoder.settings()
    assert json.loads(json.dumps(settings)) == settings
    assert settings["model_id"] == str(tiny_checkpoint.resolve())
    assert settings["family"] == "colqwen2"
    assert settings["dim"] == 128
    assert settings["max_num_visual_tokens"] == 64  # the tiny processor's max_pixels = 28*28*64
    assert settings["mask_non_image_embeddings"] is False
    assert str(settings["fingerprint"]).startswith("sha256:")
    assert settings["revision"] is None  # a folder that did not come from the Hub has no commit
    assert settings["hub_id"] is None and settings["path"] == str(tiny_checkpoint.resolve())
    assert settings["base_model"] is None


def test_encode_images_shapes_dtype_and_no_padding_rows(
    tiny_encoder: ColPaliEncoder, mixed_images: list[Image.Image]
) -> None:
    out = tiny_encoder.encode_images(mixed_images, batch_size=len(mixed_images))
    assert len(out) == len(mixed_images)
    lengths = {arr.shape[0] for arr in out}
    assert len(lengths) > 1, "images of different sizes should give different lengths (so padding happened)"
    for arr in out:
        assert arr.dtype == np.float32
        assert arr.ndim == 2 and arr.shape[1] == 128
        # Real rows are L2-normalised; padding rows would be zero (or NaN with sdpa on CPU).
        np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1.0, atol=1e-4)


def test_batched_equals_one_by_one(tiny_encoder: ColPaliEncoder, mixed_images: list[Image.Image]) -> None:
    batched = tiny_encoder.encode_images(mixed_images, batch_size=3)
    single = [tiny_encoder.encode_images([image])[0] for image in mixed_images]
    for b, s in zip(batched, single):
        assert b.shape == s.shape
        np.testing.assert_allclose(b, s, atol=1e-5)
    # Distinct inputs give distinct outputs, so a wrong order could not pass the check above.
    assert not np.allclose(single[0][-5:], single[3][-5:], atol=1e-3)


def test_preparing_the_next_batch_ahead_changes_no_vector(
    tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder, mixed_images: list[Image.Image]
) -> None:
    """Batch n+1 prepared on a helper thread while batch n runs: the same vectors in the same order, queries too;
    off by default on CPU (the processor and the model would share its cores), on elsewhere."""
    ahead = ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32", prefetch=True)
    assert ahead.prefetch and not tiny_encoder.prefetch
    together = ahead.encode_images(mixed_images, batch_size=2)
    for a, b in zip(together, tiny_encoder.encode_images(mixed_images, batch_size=2), strict=True):
        assert np.array_equal(a, b)
    queries = ["a first query", "another", "a third one", "four"]
    for a, b in zip(ahead.encode_queries(queries, batch_size=1), tiny_encoder.encode_queries(queries, batch_size=1),
                    strict=True):
        assert np.array_equal(a, b)


def test_the_image_processor_runs_where_its_device_says_with_the_same_vectors(
    tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder, mixed_images: list[Image.Image]
) -> None:
    """On CUDA the encoder sets the image processor's ``device`` (pixels made on the GPU); on a CPU it leaves it
    unset. The path it takes (the processor's torchvision backend told a device) gives the same vectors."""
    from docpc_retrievers.encoders.colpali import _process_images_on

    assert not tiny_encoder.processes_on_device
    assert getattr(tiny_encoder.processor.image_processor, "device", None) is None
    told = ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32", prefetch=True)
    told.processor.image_processor.device = "cpu"
    for a, b in zip(told.encode_images(mixed_images, batch_size=2), tiny_encoder.encode_images(mixed_images),
                    strict=True):
        assert np.array_equal(a, b)
    assert _process_images_on(told.processor, "cuda:0") and told.processor.image_processor.device == "cuda:0"

    class NoDevice:
        image_processor = type("P", (), {"_valid_kwargs_names": ["size"]})()

    assert not _process_images_on(NoDevice(), "cuda")


def test_batches_are_cast_to_the_model_dtype_where_they_are_made(tiny_checkpoint: Path) -> None:
    """The helper casts floating inputs to the model's dtype before they move (half the bytes to copy in bfloat16);
    integer inputs keep theirs."""
    import torch

    from docpc_retrievers.encoders.batches import feed

    def process(batch: list[int]) -> dict:
        return {"pixel_values": torch.full((len(batch), 3), 0.1), "input_ids": torch.tensor(batch), "note": "x"}

    seen = list(feed(iter([[1, 2], [3]]), process, device="cpu", dtype=torch.bfloat16, ahead=True))
    assert [inputs["input_ids"].tolist() for _, inputs in seen] == [[1, 2], [3]]
    assert all(inputs["pixel_values"].dtype == torch.bfloat16 for _, inputs in seen)
    assert seen[0][1]["input_ids"].dtype == torch.int64 and seen[0][1]["note"] == "x"


def test_a_failing_batch_stops_the_preparation_ahead() -> None:
    from docpc_retrievers.encoders.batches import prepared

    seen: list[int] = []

    def process(batch: list[int]) -> dict:
        seen.append(batch[0])
        return {"n": batch[0]}

    batches = [[i] for i in range(6)]
    assert [b["n"] for b in prepared(batches, process, True)] == list(range(6))
    seen.clear()
    for b in prepared(batches, process, True):
        if b["n"] == 1:
            break
    assert seen[:2] == [0, 1] and len(seen) <= 3  # at most the one batch ahead was prepared after the stop


def test_encoding_is_deterministic(tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder) -> None:
    image = _noise_image((320, 240), seed=42)
    first = tiny_encoder.encode_images([image])[0]
    again = tiny_encoder.encode_images([image])[0]
    other = ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32").encode_images([image])[0]
    assert np.array_equal(first, again)
    np.testing.assert_allclose(first, other, atol=1e-6)
    assert not np.allclose(first, tiny_encoder.encode_images([_noise_image((320, 240), seed=43)])[0], atol=1e-3)


def test_encode_queries(tiny_encoder: ColPaliEncoder) -> None:
    queries = ["revenue", "what is the total revenue reported in the annual statement for 2024?"]
    batched = tiny_encoder.encode_queries(queries, batch_size=2)
    single = [tiny_encoder.encode_queries([q])[0] for q in queries]
    assert len(batched) == 2
    assert batched[0].shape[0] < batched[1].shape[0]
    for b, s in zip(batched, single):
        assert b.dtype == np.float32 and b.shape[1] == 128
        assert b.shape[0] >= 11  # at least one token plus colpali-engine's 10 augmentation tokens
        assert b.shape == s.shape
        np.testing.assert_allclose(b, s, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)


def test_empty_inputs_and_type_errors(tiny_encoder: ColPaliEncoder) -> None:
    assert tiny_encoder.encode_images([]) == []
    assert tiny_encoder.encode_queries([]) == []
    with pytest.raises(TypeError):
        tiny_encoder.encode_queries("a single string")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tiny_encoder.encode_images([np.zeros((10, 10, 3))])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        tiny_encoder.encode_queries(["q"], batch_size=0)


def test_load_encoder_returns_an_encoder(tiny_checkpoint: Path) -> None:
    encoder = load_encoder(str(tiny_checkpoint), device="cpu", batch_size=2)
    assert isinstance(encoder, Encoder)
    assert isinstance(encoder, ColPaliEncoder) and encoder.batch_size == 2


# --------------------------------------------------------------------------- visual tokens and grids


@pytest.mark.parametrize("size", [*MIXED_SIZES, GRID_SIZE])
def test_patch_grid_matches_visual_tokens(tiny_encoder: ColPaliEncoder, size: tuple[int, int]) -> None:
    image = _noise_image(size, seed=7)
    (info,) = tiny_encoder.encode_images_with_info([image])
    rows, cols = tiny_encoder.image_patch_grid(size)
    assert info.patch_grid == (rows, cols)
    assert int(info.visual_mask.sum()) == rows * cols
    assert info.visual_mask.shape == (info.embeddings.shape[0],)
    assert 0 < rows * cols < info.embeddings.shape[0]  # prompt tokens are kept by default
    assert np.array_equal(info.embeddings, tiny_encoder.encode_images([image])[0])
    # Orientation: a wide image has more columns than rows, a tall one the opposite.
    width, height = size
    if width >= 2 * height:
        assert cols > rows
    if height >= 2 * width:
        assert rows > cols


def test_max_num_visual_tokens_changes_visual_vectors(tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder) -> None:
    grid = _noise_image(GRID_SIZE, seed=3)
    counts = {}
    for cap in (16, None, 256):
        encoder = tiny_encoder if cap is None else ColPaliEncoder(
            tiny_checkpoint, device="cpu", max_num_visual_tokens=cap
        )
        (info,) = encoder.encode_images_with_info([grid])
        rows, cols = encoder.image_patch_grid(GRID_SIZE)
        counts[cap] = int(info.visual_mask.sum())
        assert counts[cap] == rows * cols
        assert counts[cap] <= (cap or 64)
        assert encoder.settings()["max_num_visual_tokens"] == (cap or 64)
    assert counts[16] < counts[None] < counts[256]
    assert counts[256] > 200


def test_max_num_visual_tokens_validation(tiny_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="minimum"):
        ColPaliEncoder(tiny_checkpoint, device="cpu", max_num_visual_tokens=2)
    with pytest.raises(ValueError, match="only supported"):
        ColPaliEncoder(tiny_checkpoint, family="colpali", device="cpu", max_num_visual_tokens=256)
    with pytest.raises(ValueError):
        ColPaliEncoder(tiny_checkpoint, device="cpu", max_num_visual_tokens=0)


def test_mask_non_image_embeddings_keeps_only_visual_rows(
    tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder
) -> None:
    image = _noise_image((640, 480), seed=5)
    masked = ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32", mask_non_image_embeddings=True)
    (info,) = masked.encode_images_with_info([image])
    (full,) = tiny_encoder.encode_images_with_info([image])
    rows, cols = masked.image_patch_grid(image.size)
    assert info.embeddings.shape == (rows * cols, 128)
    assert info.visual_mask.all()
    np.testing.assert_allclose(info.embeddings, full.embeddings[full.visual_mask], atol=1e-5)
    assert masked.settings()["mask_non_image_embeddings"] is True
    assert masked.settings() != tiny_encoder.settings()


# --------------------------------------------------------------------------- family detection

_FAMILY_CONFIGS = [
    ("colqwen2", "qwen2_vl", "ColQwen2"),
    ("colqwen2_5", "qwen2_5_vl", "ColQwen2_5"),
    ("colqwen3", "qwen3_vl", "ColQwen3"),
    ("colqwen3_5", "qwen3_5", "ColQwen3_5"),
    ("colpali", "paligemma", "ColPali"),
    ("colidefics3", "idefics3", "ColIdefics3"),
    ("colmodernvbert", "modernvbert", "ColModernVBert"),
    ("colgemma3", "gemma3", "ColGemma3"),
]


def _write_config(folder: Path, filename: str = "config.json", **content: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(json.dumps(content))
    return folder


def test_family_table_covers_supported_families() -> None:
    assert sorted(f for f, _, _ in _FAMILY_CONFIGS) == sorted(SUPPORTED_FAMILIES)
    import colpali_engine.models as ce_models

    for family in SUPPORTED_FAMILIES:
        spec = encoders.families._FAMILIES[family]
        assert hasattr(ce_models, spec.model_class), spec.model_class
        assert hasattr(ce_models, spec.processor_class), spec.processor_class


@pytest.mark.parametrize(("family", "model_type", "architecture"), _FAMILY_CONFIGS)
def test_detect_family_from_config(
    tmp_path: Path, offline: None, family: str, model_type: str, architecture: str
) -> None:
    by_arch = _write_config(tmp_path / "arch", architectures=[architecture])
    by_type = _write_config(tmp_path / "type", model_type=model_type, architectures=["SomethingForCausalLM"])
    assert detect_family(by_arch) == family
    assert detect_family(str(by_type)) == family


def test_detect_family_follows_peft_adapter(tmp_path: Path, offline: None) -> None:
    base = _write_config(tmp_path / "base", model_type="qwen2_5_vl", architectures=["ColQwen2_5"])
    adapter = _write_config(tmp_path / "adapter", "adapter_config.json", base_model_name_or_path=str(base))
    assert detect_family(adapter) == "colqwen2_5"
    missing_base = _write_config(
        tmp_path / "adapter2", "adapter_config.json", base_model_name_or_path=str(tmp_path / "gone")
    )
    with pytest.raises(ModelLoadError, match="gone"):
        detect_family(missing_base)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "Supported families: colqwen2"),
        ({"model_type": "qwen2_vl", "architectures": ["BiQwen2"]}, "single-vector"),
        ({"model_type": "colqwen2", "architectures": ["ColQwen2ForRetrieval"]}, "-hf"),
    ],
)
def test_detect_family_rejects_unsupported(
    tmp_path: Path, offline: None, config: dict[str, Any], message: str
) -> None:
    folder = _write_config(tmp_path / "ckpt", **config)
    with pytest.raises(ModelLoadError, match=message):
        detect_family(folder)


def test_family_override_and_unknown_family(tiny_checkpoint: Path, offline: None) -> None:
    with pytest.raises(ModelLoadError, match="Supported families"):
        ColPaliEncoder(tiny_checkpoint, family="colbert-v2", device="cpu")
    encoder = ColPaliEncoder(tiny_checkpoint, family="ColQwen2", device="cpu")
    assert encoder.family == "colqwen2"


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_peft_adapter_checkpoint_loads(tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder, tmp_path: Path) -> None:
    import torch
    from colpali_engine.models import ColQwen2, ColQwen2Processor
    from peft import LoraConfig, get_peft_model

    base = ColQwen2.from_pretrained(str(tiny_checkpoint), dtype=torch.float32)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lora = get_peft_model(
            base, LoraConfig(r=4, lora_alpha=8, target_modules=["custom_text_proj"], init_lora_weights=False)
        )
    adapter_dir = tmp_path / "adapter"
    lora.save_pretrained(adapter_dir)
    ColQwen2Processor.from_pretrained(str(tiny_checkpoint)).save_pretrained(adapter_dir)
    assert not (adapter_dir / "config.json").exists()

    encoder = ColPaliEncoder(adapter_dir, device="cpu")
    assert encoder.family == "colqwen2"
    assert encoder.settings()["base_model"] == str(tiny_checkpoint)
    image = _noise_image((300, 400), seed=11)
    adapted = encoder.encode_images([image])[0]
    plain = tiny_encoder.encode_images([image])[0]
    assert adapted.shape == plain.shape
    assert not np.allclose(adapted, plain, atol=1e-3), "the adapter's weights were not applied"


# --------------------------------------------------------------------------- missing checkpoints


def test_missing_local_folder(tmp_path: Path, no_network: None) -> None:
    missing = tmp_path / "no" / "such" / "checkpoint"
    for model in (missing, str(missing)):
        with pytest.raises(ModelLoadError) as err:
            ColPaliEncoder(model, device="cpu")
        message = str(err.value)
        assert str(missing) in message
        assert "--local-dir" in message and DEFAULT_MODEL in message


def test_folder_without_weights(tmp_path: Path, tiny_checkpoint: Path, offline: None) -> None:
    folder = tmp_path / "config_only"
    folder.mkdir()
    (folder / "config.json").write_bytes((tiny_checkpoint / "config.json").read_bytes())
    with pytest.raises(ModelLoadError, match="config_only"):
        ColPaliEncoder(folder, device="cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="neither config.json nor adapter_config.json"):
        ColPaliEncoder(empty, device="cpu")


def test_unknown_hub_id_offline(offline: None) -> None:
    model = "docpc-no-such-org/no-such-colqwen-checkpoint-7f3a"
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as err:
        ColPaliEncoder(model, device="cpu")
    assert time.perf_counter() - started < 5
    message = str(err.value)
    assert model in message
    assert f"hf download {model} --local-dir DIR" in message
    assert "HF_HUB_OFFLINE=1" in message


def test_invalid_hub_id(no_network: None) -> None:
    with pytest.raises(ModelLoadError, match="not a valid id!!"):
        ColPaliEncoder("not a valid id!!", device="cpu")


def test_unreachable_hub_fails_fast_without_offline_env(
    monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    """Without HF_HUB_OFFLINE, one failed probe switches to the cache instead of ~25 s of retries."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    probes: list[bool] = []
    real_probe = encoders.checkpoints._hub_reachable

    def counting_probe(timeout: float = 3.0) -> bool:
        probes.append(result := real_probe(timeout))
        return result

    monkeypatch.setattr(encoders.checkpoints, "_hub_reachable", counting_probe)
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="docpc-no-such-org/unreachable-model"):
        ColPaliEncoder("docpc-no-such-org/unreachable-model", device="cpu")
    assert time.perf_counter() - started < 5
    assert probes == [False]


# --------------------------------------------------------------------------- device / dtype


@pytest.mark.parametrize(("flags", "expected"), [(("avx2", "avx512_vnni"), "float32"), (("avx512_bf16",), "bfloat16"),
                                                 (("amx_bf16",), "bfloat16"), (("asimd", "bf16"), "bfloat16")])
def test_a_cpu_gets_bfloat16_only_where_it_multiplies_bfloat16_in_hardware(
        flags: tuple[str, ...], expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from docpc_retrievers.encoders import colpali
    from docpc_retrievers.machine.cpu import CPU

    monkeypatch.setattr(colpali, "this_cpu", lambda: CPU("test CPU", "x86_64", 2, flags))
    assert colpali.pick_dtype(None, "cpu") is getattr(torch, expected)
    assert colpali.pick_dtype(None, "mps") is torch.float32
    assert colpali.pick_dtype("float32", "cpu") is torch.float32  # an explicit dtype always wins


def test_bfloat16_on_the_cpu_gives_the_float32_vectors_within_its_rounding(
        tiny_checkpoint: Path, tiny_encoder: ColPaliEncoder) -> None:
    """What a CPU with native bfloat16 now gets by default: the same rows as float32 within bfloat16's rounding,
    and the same MaxSim ranking of two images for a query (tiny random weights: plumbing, not quality)."""
    from docpc_retrievers.scoring.maxsim import maxsim

    bf16 = ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="bfloat16")
    images = [_noise_image((224, 160), 0), _noise_image((160, 224), 1)]
    a, b = tiny_encoder.encode_images(images), bf16.encode_images(images)
    for x, y in zip(a, b):
        assert x.shape == y.shape and y.dtype == np.float32
        cos = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
        assert cos.min() > 0.98, cos.min()
    q32, q16 = tiny_encoder.encode_queries(["a table of results"])[0], bf16.encode_queries(["a table of results"])[0]
    np.testing.assert_allclose(maxsim([q16], b), maxsim([q32], a), rtol=0.05)


def test_default_dtype_per_device() -> None:
    import torch

    assert encoders.pick_dtype(None, "cuda") is torch.bfloat16
    assert encoders.pick_dtype(None, "cuda:1") is torch.bfloat16
    assert encoders.pick_dtype(None, "mps") is torch.float32
    from docpc_retrievers.machine.cpu import this_cpu

    assert encoders.pick_dtype(None, "cpu") is (torch.bfloat16 if this_cpu().native_bfloat16 else torch.float32)
    assert encoders.pick_dtype("bf16", "cpu") is torch.bfloat16
    assert encoders.pick_dtype("torch.float16", "cpu") is torch.float16
    assert encoders.pick_dtype(torch.float64, "cpu") is torch.float64
    with pytest.raises(ValueError):
        encoders.pick_dtype("int8", "cpu")
    with pytest.raises(ValueError):
        encoders.pick_device("not-a-device")
    assert encoders.pick_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            encoders.pick_device("cuda")


def test_the_blocks_are_compiled_only_past_the_threshold_and_only_for_images(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, mixed_images: list[Image.Image]
) -> None:
    """On CUDA the repeated blocks compile once a process has encoded more than DOCPC_COMPILE_AFTER images (5,000 by
    default); never on a CPU unless the variable asks. Queries keep the eager blocks; a compile that fails leaves the
    encoder eager with the same vectors."""
    from docpc_retrievers.encoders import compiled as compiled_module
    from docpc_retrievers.encoders.compiled import DEFAULT_COMPILE_AFTER, compile_after, repeated_blocks

    monkeypatch.delenv("DOCPC_COMPILE_AFTER", raising=False)
    assert compile_after("cuda") == DEFAULT_COMPILE_AFTER == 5000 and compile_after("cpu") is None
    monkeypatch.setenv("DOCPC_COMPILE_AFTER", "never")
    assert compile_after("cuda") is None
    monkeypatch.setenv("DOCPC_COMPILE_AFTER", "-3")
    with pytest.raises(ValueError, match="DOCPC_COMPILE_AFTER"):
        compile_after("cuda")
    monkeypatch.setenv("DOCPC_COMPILE_AFTER", "3")
    assert compile_after("cuda:0") == 3

    encoder = ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32")
    assert encoder.compiled.after is None and not encoder.compiled.active
    blocks = repeated_blocks(encoder.model)
    assert len({type(b).__name__ for b in blocks}) == 2 and len(blocks) == 4  # the vision blocks, the decoder layers
    eager = encoder.encode_images(mixed_images, batch_size=2)

    # Force the threshold on a CPU and make the compiler fail: the encoder goes on eagerly, same vectors.
    encoder.compiled.after = 2
    calls: list[int] = []

    def failing_compile(fn: object, *args: object, **kwargs: object) -> object:
        def run(*a: object, **k: object) -> object:
            calls.append(1)
            raise RuntimeError("no compiler")
        return run

    monkeypatch.setattr("torch.compile", failing_compile)
    again = encoder.encode_images(mixed_images, batch_size=2)
    assert calls and encoder.compiled.broken and not encoder.compiled.active
    for a, b in zip(again, eager, strict=True):
        assert np.array_equal(a, b)
    assert all(getattr(b, "_compiled_call_impl", None) is None for b in blocks)
    del compiled_module
