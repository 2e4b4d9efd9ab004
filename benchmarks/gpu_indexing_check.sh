#!/usr/bin/env bash
# Indexing end to end on a GPU machine in one device call (about 8 minutes on an H200): install the wheels
# benchmarks/gpu_wheels.sh downloaded (carry .whl), then indexing_pipeline_bench.py's steps that compare the
# encoder in a process of its own with the encoding thread, against rendering alone and encoding alone, grid and
# page mode. Results land in $OUT/pipeline (indexing_pipeline.json, timelines.json).
#   run: bash benchmarks/gpu_indexing_check.sh            (carry: [".whl"])
# BUDGET (seconds, default 470) bounds the steps; WORKERS (default 14) the render processes; STEPS replaces the list.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp}/pipeline
w=${WORKERS:-14}
steps=${STEPS:-"grid_encode_alone_all_b16 grid_index_process_b16_w$w grid_index_after_b16_w$w page_render_alone_w$w
  page_encode_alone_b16 page_index_process_b16_w$w grid_same_files_index_process_b16_w$w page_index_after_b16_w$w"}
# shellcheck disable=SC2086
python3 benchmarks/indexing_pipeline_bench.py --out "$out" --documents 1200 --page-documents 40 --batches 16 \
    --sweep --workers "$w" --budget "${BUDGET:-470}" --steps $steps
