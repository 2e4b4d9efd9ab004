"""Check that torch and torchvision import and work together; print the fix when they do not.

A mismatched pair (e.g. a CPU-only torch wheel from a local find-links folder
next to the registry's CUDA torchvision) only shows itself at import time as
``RuntimeError: operator torchvision::nms does not exist``; this check runs
that import and a tiny torchvision op so setup fails early and clearly.
"""

from __future__ import annotations

import sys

FIX = """\
torch/torchvision are missing or do not match:
  {error}
Fix (reinstall the pair from the package registry, ignoring local wheel folders):
  .venv/bin/pip uninstall -y torch torchvision
  PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null .venv/bin/pip install -c scripts/constraints.txt torch torchvision
or simply re-run: bash scripts/setup.sh"""


def main() -> int:
    quiet = "--quiet" in sys.argv[1:]
    try:
        import torch
        import torchvision
        from torchvision.ops import nms

        keep = nms(torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([1.0]), 0.5)
        if keep.tolist() != [0]:
            raise RuntimeError(f"torchvision.ops.nms returned {keep.tolist()}")
        # The Qwen2-VL image processor imports torchvision at module import.
        from transformers.models.qwen2_vl import image_processing_qwen2_vl  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure here means the same fix
        if not quiet:
            print(FIX.format(error=f"{type(exc).__name__}: {exc}"), file=sys.stderr)
        return 1
    if not quiet:
        print(f"torch {torch.__version__} + torchvision {torchvision.__version__}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
