#!/usr/bin/env bash
# Download, into .whl/, the wheels a GPU benchmark machine lacks for indexing end to end (its image has torch,
# transformers, peft, pillow, numpy, grpcio, protobuf, tokenizers, onnxruntime, httpx, rich, typer, attrs, but no
# chromadb, PyMuPDF or colpali-engine, and no registry). About 52 MB; Python 3.12 on x86-64 Linux.
# On that machine: python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#                  export PYTHONPATH=/tmp/site:$PWD
# chromadb's kubernetes and bcrypt requirements are left out: an embedded client never imports them.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl \
    chromadb==1.5.9 colpali-engine==0.3.18 pymupdf==1.26.5 \
    annotated-types==0.8.0 googleapis-common-protos==1.76.0 importlib-resources==7.1.0 jsonschema==4.26.0 \
    jsonschema-specifications==2025.9.1 mmh3==5.3.1 opentelemetry-api==1.45.2 \
    opentelemetry-exporter-otlp-common==0.66b2 opentelemetry-exporter-otlp-proto-common==1.45.2 \
    opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2 \
    opentelemetry-semantic-conventions==0.66b2 orjson==3.13.0 overrides==7.7.0 pybase64==1.5.1 pydantic==2.14.4 \
    pydantic-core==2.50.5 pydantic-settings==2.16.3 pypika==0.51.1 python-dotenv==1.2.4 referencing==0.37.0 \
    rpds-py==2026.9.1 tenacity==9.2.1 typing-inspection==0.4.5
du -sh .whl
