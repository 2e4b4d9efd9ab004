#!/usr/bin/env bash
# Set up everything on a fresh machine: .venv/ with a matching torch/torchvision
# pair, docpc-retrievers (editable) with its dev tools, and the framework
# integrations under integrations/. Safe to re-run: it only installs what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
CONSTRAINTS="$ROOT/scripts/constraints.txt"

if [ ! -x "$VPY" ]; then
  echo "==> creating $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi

# Some machines (these CI machines among them) carry a global pip config whose
# find-links folder holds a CPU-only torch wheel; pip then pairs it with the
# registry's CUDA torchvision and `import torchvision` fails with
# "operator torchvision::nms does not exist". Install the pair from the package
# registry alone, with that config switched off, so the two always match.
pip_clean() { PIP_FIND_LINKS="" PIP_CONFIG_FILE=/dev/null "$VPY" -m pip "$@"; }

if ! "$VPY" "$ROOT/scripts/check_torch.py" --quiet 2>/dev/null; then
  echo "==> installing a matching torch/torchvision pair (large download, a few minutes)"
  pip_clean install --quiet --disable-pip-version-check -c "$CONSTRAINTS" torch torchvision
fi

# The HTML report test (docpc show) loads the report in a real headless browser:
# Debian's Chromium and its driver, so nothing is downloaded at test time.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "==> installing Chromium and ChromeDriver (Debian packages) for the report test"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q chromium chromium-driver >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium chromium-driver >/dev/null; }
fi

echo "==> installing docpc-retrievers, its integrations and dev tools"
packages=(-e "$ROOT[dev]")
for pkg in "$ROOT"/integrations/*/; do
  [ -f "$pkg/pyproject.toml" ] && packages+=(-e "$pkg")
done
pip_clean install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "${packages[@]}"

echo "==> checking the torch/torchvision pair"
"$VPY" "$ROOT/scripts/check_torch.py"
"$VENV/bin/docpc" --version
echo "==> ready: $VENV/bin/docpc, $VENV/bin/python"
