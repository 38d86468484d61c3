#!/usr/bin/env bash
# Everything that needs a real NVIDIA GPU, in one run: the gpu-marked tests and the benchmarks.
# Runs from the source tree with the machine's own torch (PYTHONPATH=.), as on the lent H200.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PY:-python3}
nvidia-smi -L
echo "== gpu-marked tests"
$PY -m pytest -q -m gpu -p no:cacheprovider tests
echo "== benchmarks/gpu_status.py"
$PY benchmarks/gpu_status.py
echo "== benchmarks/train_overhead.py --device cuda"
$PY benchmarks/train_overhead.py --device cuda --repeat 7
