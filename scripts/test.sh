#!/usr/bin/env bash
# Run the whole test suite (core and integrations) offline: no model hub is ever contacted.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 ANONYMIZED_TELEMETRY=False
paths=(tests)
for pkg in integrations/*/; do
  [ -d "$pkg/tests" ] && paths+=("$pkg/tests")
done
exec "$ROOT/.venv/bin/python" -m pytest "${paths[@]}" "$@"
