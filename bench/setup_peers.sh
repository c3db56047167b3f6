#!/usr/bin/env bash
# Create the isolated virtualenvs the ingest benchmark runs its peer engines in.
#
# The peers pin libraries the project also uses (quixstreams needs confluent-kafka<2.13,
# faust-streaming brings aiokafka and its own rocksdict range), so each peer gets its own
# venv under .bench-venv/ at the repository root and the project's environment is untouched.
#
# Idempotent: a venv whose peer package already imports at the pinned version is skipped.
# Usage: bash bench/setup_peers.sh            (from anywhere)
#        FORCE=1 bash bench/setup_peers.sh    (recreate both venvs)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_ROOT="${BENCH_VENV_ROOT:-$ROOT/.bench-venv}"
PYTHON="${PYTHON:-python3}"

QUIX_VERSION="3.28.1"
FAUST_VERSION="0.15.3"

# quiet_pip VENV ARGS...: pip install, minus this machine's notes about absent local indexes.
quiet_pip() {
    local venv="$1"
    shift
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 |
        { grep -v "^WARNING: Location 'file://" || true; } >&2
}

# make_venv NAME CHECK_MODULE EXPECTED_VERSION PIP_SPEC...
make_venv() {
    local name="$1" module="$2" version="$3"
    shift 3
    local venv="$VENV_ROOT/$name"
    if [[ -z "${FORCE:-}" && -x "$venv/bin/python" ]] &&
        "$venv/bin/python" - "$module" "$version" <<'PY' 2>/dev/null; then
import importlib.metadata as md
import sys

dist, want = sys.argv[1], sys.argv[2]
sys.exit(0 if md.version(dist) == want else 1)
PY
        echo "setup_peers: $venv already has $module==$version, skipping" >&2
        return 0
    fi
    echo "setup_peers: creating $venv ($*)" >&2
    rm -rf "$venv"
    mkdir -p "$VENV_ROOT"
    "$PYTHON" -m venv "$venv"
    quiet_pip "$venv" --upgrade pip
    quiet_pip "$venv" "$@"
    echo "setup_peers: $venv ready: $("$venv/bin/python" -m pip freeze | grep -i -E "^($module|confluent|rocksdict|aiokafka)" | tr '\n' ' ')" >&2
}

make_venv quix quixstreams "$QUIX_VERSION" "quixstreams==$QUIX_VERSION" orjson
# faust-streaming 0.15.3 names the extra "rocksdict" (Requires-Dist: rocksdict<4.0,>=0.3.11;
# extra == "rocksdict"); the older "rocksdb" extra needs faust-streaming-rocksdb (RocksDB 6).
make_venv faust faust-streaming "$FAUST_VERSION" "faust-streaming[rocksdict]==$FAUST_VERSION" orjson

echo "setup_peers: done; venvs under $VENV_ROOT" >&2
