#!/usr/bin/env bash
# Set up everything on a fresh machine (Linux or macOS, no sudo needed): .venv/ with a matching torch/torchvision
# pair, docpc-retrievers (editable) with its dev tools and the framework integrations under integrations/; a
# browser for the report test where one can be installed; and, for every other Python the package declares that is
# present here (oldest and newest), .venv-py3.X/ for the smoke test when DOCPC_OTHER_PYTHONS=1 asks (CI sets it;
# each costs a torch of its own). Safe to re-run: it installs only what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
CONSTRAINTS="$ROOT/scripts/constraints.txt"

if ! command -v "$PYTHON" >/dev/null; then
  echo "setup: $PYTHON not found; install Python 3.10 or newer (or set PYTHON=/path/to/python3)" >&2
  exit 1
fi
if ! version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"; then
  echo "setup: $PYTHON does not run here; set PYTHON=/path/to/python3 (3.10 or newer)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup: Python $version is too old; docpc-retrievers needs Python 3.10 or newer (set PYTHON=...)" >&2
  exit 1
fi

# Some machines (these CI machines among them) carry a global pip config whose find-links folder holds a CPU-only
# torch wheel; pip then pairs it with the registry's CUDA torchvision and `import torchvision` fails with
# "operator torchvision::nms does not exist". Install the pair from the package registry alone, with that config
# switched off, so the two always match.
pip_clean() { local py="$1"; shift; PIP_FIND_LINKS="" PIP_CONFIG_FILE=/dev/null "$py" -m pip "$@"; }
# Installs skip compiling every module to bytecode (--no-compile): torch alone is thousands of files, and the
# modules a run imports are compiled on first use. On a fresh clone this took setup from 302 s to 180 s.

# Free space in whole GiB on the disk holding $1 (POSIX df, so it reads the same on Linux and macOS).
free_gib() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'; }
# The registry's torch/torchvision pair takes about 6 GiB in a virtual environment (a CUDA build on x86_64 Linux)
# and about 9 GiB while it installs.
TORCH_GIB=9

# A virtual environment at $2 made with interpreter $1, holding a checked torch/torchvision pair. Returns non-zero,
# having said why, when the pair cannot be installed (a full disk is the usual cause).
make_env() {
  local python="$1" venv="$2"
  if [ ! -x "$venv/bin/python" ]; then
    echo "==> creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
  fi
  if ! "$venv/bin/python" "$ROOT/scripts/check_torch.py" --quiet 2>/dev/null; then
    echo "==> installing a matching torch/torchvision pair into $venv (large download, a few minutes;" \
         "$(free_gib "$venv") GiB free, about $TORCH_GIB GiB needed)"
    if ! pip_clean "$venv/bin/python" install --quiet --disable-pip-version-check --no-compile -c "$CONSTRAINTS" torch torchvision
    then
      echo "setup: installing torch/torchvision into $venv failed with $(free_gib "$venv") GiB free on its disk" \
           "(about $TORCH_GIB GiB is needed while it installs); free some space and re-run scripts/setup.sh" >&2
      return 1
    fi
  fi
}

# pip's arguments for the package (with extras $1) and every integration, editable, in PACKAGES (bash 3.2, as on
# macOS, has no mapfile).
set_packages() {
  PACKAGES=(-e "$ROOT$1")
  for pkg in "$ROOT"/integrations/*/; do
    if [ -f "$pkg/pyproject.toml" ]; then PACKAGES+=(-e "$pkg"); fi
  done
}

make_env "$PYTHON" "$ROOT/.venv"
VPY="$ROOT/.venv/bin/python"
echo "==> installing docpc-retrievers, its integrations and dev tools"
set_packages "[dev]"
pip_clean "$VPY" install --quiet --disable-pip-version-check --no-compile -c "$CONSTRAINTS" "${PACKAGES[@]}"
echo "==> checking the torch/torchvision pair"
"$VPY" "$ROOT/scripts/check_torch.py"
"$ROOT/.venv/bin/docpc" --version

# The HTML report test (docpc show) loads the report in a real headless browser: Chromium or Chrome and a
# ChromeDriver found on the machine, never downloaded at test time. Installed here only where that is possible
# without asking anyone (Debian's packages as root or with password-less sudo); elsewhere the test says why it skips.
have_browser() {
  { command -v chromium || command -v chromium-browser || command -v google-chrome || command -v google-chrome-stable \
    || [ -x "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" ] \
    || [ -x "/Applications/Chromium.app/Contents/MacOS/Chromium" ]; } >/dev/null && command -v chromedriver >/dev/null
}
if ! have_browser; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
  if command -v apt-get >/dev/null && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
    echo "==> installing Chromium and ChromeDriver (Debian packages) for the report test"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -q chromium chromium-driver >/dev/null \
      || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium chromium-driver >/dev/null; } \
      || echo "==> could not install Chromium; the report test will skip and say why"
  else
    echo "==> no Chromium/Chrome with ChromeDriver here, and no way to install them without asking: the report" \
         "test will skip and say why (install them, e.g. 'brew install --cask chromium chromedriver', to run it)"
  fi
fi

# The oldest and newest Pythons the package declares, each in its own environment for the smoke test
# (tests/test_smoke_pythons.py), where the interpreter is present: on PATH as python3.X, or under pyenv.
if [ "${DOCPC_OTHER_PYTHONS:-0}" = "0" ]; then
  echo "==> one environment only: DOCPC_OTHER_PYTHONS=1 bash scripts/setup.sh adds the oldest and newest declared" \
       "Pythons for the smoke test (CI does)"
else
  main_version="$("$VPY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  for version in $("$VPY" "$ROOT/scripts/declared_pythons.py" --ends); do
    [ "$version" = "$main_version" ] && continue
    interpreter="$(command -v "python$version" 2>/dev/null || true)"
    if [ -z "$interpreter" ] || ! "$interpreter" --version >/dev/null 2>&1; then  # pyenv's shims refuse unselected
      interpreter="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version" 2>/dev/null | tail -n 1 || true)"
    fi
    if [ -z "$interpreter" ]; then
      echo "==> Python $version (declared) is not on this machine: its smoke test will be skipped"
      continue
    fi
    # Each of these environments holds its own torch: with too little disk left they are not made, and their smoke
    # tests skip, rather than the whole setup failing half way (the main environment and its suite come first).
    if [ ! -x "$ROOT/.venv-py$version/bin/python" ] && [ "$(free_gib "$ROOT")" -lt $((TORCH_GIB + 3)) ]; then
      echo "==> only $(free_gib "$ROOT") GiB free: not making .venv-py$version (about $((TORCH_GIB + 3)) GiB with" \
           "room for the tests); its smoke test will be skipped"
      continue
    fi
    if ! make_env "$interpreter" "$ROOT/.venv-py$version"; then
      rm -rf "$ROOT/.venv-py$version"
      echo "==> .venv-py$version removed: its smoke test will be skipped"
      continue
    fi
    echo "==> installing docpc-retrievers and its integrations for Python $version"
    set_packages ""
    pip_clean "$ROOT/.venv-py$version/bin/python" install --quiet --disable-pip-version-check --no-compile -c "$CONSTRAINTS" \
      "${PACKAGES[@]}"
  done
fi
echo "==> ready: $ROOT/.venv/bin/docpc, $VPY"
