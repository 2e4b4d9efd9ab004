#!/usr/bin/env bash
# Run the whole test suite (core and integrations) offline: no model hub is ever contacted. It includes the smoke
# test under the oldest and newest declared Pythons that scripts/setup.sh set up (tests/test_smoke_pythons.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 ANONYMIZED_TELEMETRY=False
# Every Chroma client the tests make (theirs, and those of the commands and servers they start) refuses what hosted
# Chroma's quotas refuse (docpc_retrievers/store/chroma_quotas.py); DOCPC_CHROMA_QUOTAS= runs them without.
export DOCPC_CHROMA_QUOTAS="${DOCPC_CHROMA_QUOTAS-hosted}"
# The tests read the sample PDFs in tests/data/sample-pdfs; DOCPC_PDF_CORPUS points them at another copy.
if [ -n "${DOCPC_PDF_CORPUS:-}" ]; then
  DOCPC_PDF_CORPUS="$(cd "$DOCPC_PDF_CORPUS" && pwd -P)"  # physical: the index stores resolved paths
  export DOCPC_PDF_CORPUS
fi
paths=(tests)
for pkg in integrations/*/; do
  if [ -d "$pkg/tests" ]; then paths+=("$pkg/tests"); fi
done
# Two worker processes (CI has two cores), each test file on one of them: a file's module fixtures are built once.
exec "$ROOT/.venv/bin/python" -m pytest -n "${DOCPC_TEST_WORKERS:-2}" --dist loadfile "${paths[@]}" "$@"
