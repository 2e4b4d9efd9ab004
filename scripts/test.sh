#!/usr/bin/env bash
# Run the whole test suite (core and integrations) offline: no model hub is ever contacted.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 ANONYMIZED_TELEMETRY=False
# The real PDFs the tests read live in ../shared/corpus next to the checkout.
export DOCPC_PDF_CORPUS="${DOCPC_PDF_CORPUS:-$(cd "$ROOT/.." && pwd)/shared/corpus/py-pdf-sample-files}"
if [ -d "$DOCPC_PDF_CORPUS" ]; then
  # Physical path: the index stores resolved paths, and tests compare against this one.
  DOCPC_PDF_CORPUS="$(cd "$DOCPC_PDF_CORPUS" && pwd -P)"
else
  echo "test corpus not found at $DOCPC_PDF_CORPUS (set DOCPC_PDF_CORPUS); tests that need it would be skipped" >&2
  [ "${CI:-}" = "true" ] && exit 1
fi
paths=(tests)
for pkg in integrations/*/; do
  [ -d "$pkg/tests" ] && paths+=("$pkg/tests")
done
# Two worker processes (CI has two cores), each test file on one of them: a file's module fixtures are built once.
exec "$ROOT/.venv/bin/python" -m pytest -n "${DOCPC_TEST_WORKERS:-2}" --dist loadfile "${paths[@]}" "$@"
