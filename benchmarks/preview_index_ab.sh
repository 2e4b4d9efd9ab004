#!/usr/bin/env bash
# `docpc index` of one folder with every grid preview lossless (before) and with the store's choice (after,
# documents/preview.py), alternated, in fresh stores: render workers' busy milliseconds a document, documents a
# second after the model's load, and the store's size. "Before" forces lossless in this process and in the render
# workers through a sitecustomize module on PYTHONPATH (nothing in the tree changes).
#   bash benchmarks/preview_index_ab.sh PDF_FOLDER CHECKPOINT [ROUNDS] [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
folder=$1 model=$2 rounds=${3:-2} workers=${4:-2}
scratch=$(mktemp -d -t docpc-preview-ab-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/hook"
printf 'import docpc_retrievers.documents.preview as _p\n_p.preview_form = lambda image: "lossless"\n' \
    > "$scratch/hook/sitecustomize.py"
for round in $(seq "$rounds"); do
  for variant in before after; do
    rm -rf "$scratch/store"
    hook=""; [ "$variant" = before ] && hook="$scratch/hook"
    PYTHONPATH="$hook" .venv/bin/docpc index "$folder" --store "$scratch/store" --model "$model" \
        --workers "$workers" --no-progress --timeline "$scratch/timeline.json" > /dev/null
    kb=$(du -sk "$scratch/store" | cut -f1)
    .venv/bin/python - "$scratch/timeline.json" "$variant" "$round" "$kb" <<'PY'
import json, sys
path, variant, round_, kb = sys.argv[1:]
d = json.load(open(path))
spans = d["spans"]
wall = max(e for _, _, e in spans)
loaded = max((e for lane, _, e in spans if lane == "encode.load"), default=0.0)
docs = sum(1 for lane, _, _ in spans if lane == "loop.wait_render")
render = sum(e - s for lane, s, e in spans if lane.startswith("render"))
print(f"{variant} round {round_}: {docs} documents, {docs / (wall - loaded):.1f} documents/s after the model's load, "
      f"render workers {1000 * render / docs:.0f} ms a document, store {int(kb) / 1024:.1f} MB")
PY
  done
done
