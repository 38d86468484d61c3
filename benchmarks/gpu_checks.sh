#!/usr/bin/env bash
# Everything that needs a real NVIDIA GPU, in one run: the gpu-marked tests and the benchmarks.
# Runs from the source tree with the machine's own torch (PYTHONPATH=.), as on a lent GPU machine
# that has torch but not the notebook stack: `make gpu-wheels` here downloads the missing wheels
# into .whl/ (carry it along); they are installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing the carried wheels failed"; exit 1; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="/tmp/site/bin:$PATH"
fi
export PYTHONPATH="$PWD:$PYTHONPATH" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export TMPDIR=$(mktemp -d) JIYU_HOME=$(mktemp -d)
nvidia-smi -L
$PY -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "== gpu-marked tests"
$PY -m pytest -q -m gpu -p no:cacheprovider -o addopts="" -rs \
  tests/test_gpu_real.py tests/test_train_gpu.py tests/test_jobs_gpu.py tests/test_server_gpu.py tests/test_train_nproc.py \
  tests/test_gpu_leases_real.py tests/test_gpu_nproc_checks.py tests/test_ranks.py
echo "== figures of the %%train --nproc GPU checks (FSDP/NCCL, bf16+accum under DDP, OOM in a rank)"
cat test-artifacts/gpu_figures.txt 2>/dev/null
echo "== benchmarks/gpu_status.py"
$PY benchmarks/gpu_status.py
echo "== benchmarks/queue_latency.py --real-gpu"
$PY benchmarks/queue_latency.py --real-gpu --repeat 3
echo "== benchmarks/train_overhead.py --device cuda (windows of >= 1 s, us/step overhead, fixed ms/call)"
$PY benchmarks/train_overhead.py --device cuda --repeat 7
echo "== benchmarks/fit_fixed_cost.py --device cuda"
$PY benchmarks/fit_fixed_cost.py --device cuda --repeat 9
echo "== benchmarks/ckpt_check.py --device cuda"
$PY benchmarks/ckpt_check.py --device cuda
echo "== benchmarks/ckpt_dcp.py --device cuda (FSDP over NCCL, a rank per GPU: full state dict vs DCP, async)"
$PY benchmarks/ckpt_dcp.py --device cuda --nproc "$(nvidia-smi -L | wc -l)" --repeat 3 --steps 8
