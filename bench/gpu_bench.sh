#!/usr/bin/env bash
# GPU figures in one device call of at most 8 minutes: tests/test_cuda.py, async blocking time for CUDA states of 1, 4 and
# 16 GB (ratio to a pinned device-to-host copy, goal <= 1.2x; and to DCP async_save and torch.save), steps beside a
# background write (ratio to no write), resume time. One JSON file: bench/results/gpu.json (see bench/gpu_bench.py).
#
# Run on one NVIDIA H200 (bench/results/gpu.json, two device calls: the second with --merge, for what the first had no time
# left for; on that card test_cuda.py alone takes about 260 s). CI runs the code paths on the CPU (--cpu-smoke;
# tests/test_gpu_bench.py). Read the JSON's "errors" and "skipped" before trusting a figure.
#
#   bash bench/gpu_bench.sh                    # on the GPU machine, from the repository root
#   bash bench/gpu_bench.sh --cpu-smoke        # the same code on the CPU, tiny sizes (figures mean nothing)
#   GPU_BENCH_SECONDS=300 bash bench/gpu_bench.sh --sizes 1,4    # a shorter budget, smaller states
#
# On an H200 everything takes about 9 minutes (test_cuda.py alone about 260 s, the 16 GB state about 140 s): within the
# 420 s budget the parts that do not fit are skipped and named in the JSON; a second call measures them and keeps the rest:
#   bash bench/gpu_bench.sh --merge bench/results/gpu.json --parts async_blocking,resume --sizes 16
# Extra arguments go to bench/gpu_bench.py. The Python run plans within GPU_BENCH_SECONDS (default 420), writing the JSON
# after every measurement; `timeout` kills it 40 s later if a part hangs, and what it measured stays in the JSON.
set -u
cd "$(dirname "$0")/.."
budget=${GPU_BENCH_SECONDS:-420}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout -k 10 $((budget + 40)) python bench/gpu_bench.py --budget "$budget" "$@"
code=$?
[ $code -eq 124 ] && echo "gpu_bench.sh: killed after $((budget + 40)) s; the JSON holds what was measured before" >&2
exit $code
