#!/usr/bin/env bash
# Issue 51 on one GPU, in one device call of about 5 minutes: bench/fit_bench.py --gpu --host, then bench/fit_bench.py
# --diagnose --gpu --host; JSON files in bench/results/ (and in $OUT where set). `--device`: batches already on the device.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
host=--host; [ "${1:-}" = --device ] && host=
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cores $(nproc), python $(python3 -c 'import sys; print(sys.version.split()[0], sys.getswitchinterval())')"
dir=$(mktemp -d)
timeout -k 10 140 python3 bench/fit_bench.py --gpu $host --modes async,memory --reps 3 --budget 100 --dir "$dir" || echo "fit_bench.py: exit $?"
[ -n "${OUT:-}" ] && cp bench/results/fit_gpu*.json "$OUT"/ 2>/dev/null
timeout -k 10 170 python3 bench/fit_bench.py --diagnose --gpu $host --reps 1 --standins gil,memcpy,disk,writer --dir "$dir" || echo "fit_bench.py --diagnose: exit $?"
rm -rf "$dir"
[ -n "${OUT:-}" ] && cp bench/results/diagnose_gpu*.json* "$OUT"/ 2>/dev/null
exit 0
