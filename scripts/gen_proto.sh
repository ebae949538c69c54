#!/usr/bin/env bash
# Regenerates src/schedd/v1/ from proto/schedd/v1/*.proto. The one place generated code comes from.
# Usage: scripts/gen_proto.sh [OUT_DIR]   (default: src; tests pass a temp dir to detect staleness)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-src}
py=${PYTHON:-.venv/bin/python}
export PATH="$(dirname "$py"):$PATH"
mkdir -p "$out/schedd/v1"
"$py" -m grpc_tools.protoc -I proto \
  --python_out="$out" --grpc_python_out="$out" \
  --mypy_out="$out" --mypy_grpc_out="$out" \
  proto/schedd/v1/*.proto
cat > "$out/schedd/v1/__init__.py" <<'PY'
"""Generated protobuf and gRPC code for the schedd.v1 API (scripts/gen_proto.sh; do not edit)."""
PY
