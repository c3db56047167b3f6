#!/usr/bin/env bash
# Regenerate the gRPC stubs from schemas/sow.proto (needs the test extra: grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
out=processor/wire
python -m grpc_tools.protoc -Ischemas --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" schemas/sow.proto
# Generated code imports its sibling as a top-level module; make it package-relative.
sed -i 's/^import sow_pb2 as sow__pb2/from . import sow_pb2 as sow__pb2/' "$out/sow_pb2_grpc.py"
