#!/usr/bin/env bash
# Indexing end to end on a GPU machine in one device call (about 8 minutes on an H200): install the wheels
# benchmarks/gpu_wheels.sh downloaded (carry .whl), then indexing_pipeline_bench.py's steps that compare the
# encoder in a process of its own with the encoding thread, against rendering alone and encoding alone, grid and
# page mode, and the encoder's process with the store's Chroma in a child `chroma run` (--chroma-process: Chroma's
# writes out of the indexing process). Results land in $OUT/pipeline (indexing_pipeline.json, timelines.json).
#   run: bash benchmarks/gpu_indexing_check.sh            (carry: [".whl"])
# BUDGET (seconds, default 470) bounds the steps; WORKERS (default 14) the render processes; STEPS replaces the list;
# DOCUMENTS (default 1200) and PAGE_DOCUMENTS (40) size the corpus. The compiled blocks in a cold and a warm
# process (one inductor cache) are a separate call: STEPS=compile_cache DOCUMENTS=16 bash benchmarks/gpu_indexing_check.sh. A rehearsal on a CPU, in the project's
# environment: PYTHON=.venv/bin/python WHEELS=0 DOCUMENTS=24 PAGE_DOCUMENTS=4 WORKERS=2 \
#   EXTRA="--device cpu --architecture tiny" bash benchmarks/gpu_indexing_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ "${WHEELS:-1}" = 1 ]; then
    "$python" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
fi
out=${OUT:-/tmp}/pipeline
w=${WORKERS:-14}
steps=${STEPS:-"grid_encode_alone_all_b16 grid_index_process_b16_w$w grid_index_after_b16_w$w
  grid_index_process_child_b16_w$w page_render_alone_w$w
  page_encode_alone_b16 page_index_process_b16_w$w page_index_process_child_b16_w$w
  grid_same_files_index_process_b16_w$w page_index_after_b16_w$w"}
# shellcheck disable=SC2086
"$python" benchmarks/indexing_pipeline_bench.py --out "$out" --documents "${DOCUMENTS:-1200}" \
    --page-documents "${PAGE_DOCUMENTS:-40}" --batches 16 --sweep --workers "$w" --budget "${BUDGET:-470}" \
    ${EXTRA:-} --steps $steps
