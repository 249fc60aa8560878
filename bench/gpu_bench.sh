#!/usr/bin/env bash
# GPU figures in one device call (bench/gpu_bench.py: the parts, the budget, the JSON): bench/results/gpu.json.
#   bash bench/gpu_bench.sh                    # on the GPU machine, from the repository root
#   bash bench/gpu_bench.sh --merge bench/results/gpu.json --parts async_blocking,resume --sizes 16   # what a cut run missed
# Extra arguments go to bench/gpu_bench.py, which plans within GPU_BENCH_SECONDS (default 420); `timeout` kills it 40 s
# later if a part hangs, and what it measured stays in the JSON.
set -u
cd "$(dirname "$0")/.."
budget=${GPU_BENCH_SECONDS:-420}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout -k 10 $((budget + 40)) python bench/gpu_bench.py --budget "$budget" "$@"
code=$?
[ $code -eq 124 ] && echo "gpu_bench.sh: killed after $((budget + 40)) s; the JSON holds what was measured before" >&2
exit $code
