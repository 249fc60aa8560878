#!/usr/bin/env bash
# The GPU figures, in parts (`tests checkpoint resume fit`; default all): tests/test_cuda.py (about 4 minutes on an H200),
# checkpoint_bench.py and resume_bench.py with --device cuda (about 3), fit_bench.py --gpu with and without --host (about 4).
# Each step is bounded by `timeout` and said when it fails; the JSON goes to bench/results/ (and to $OUT where set).
#   bash bench/gpu.sh                        # on the GPU machine; `bash bench/gpu.sh tests`: one part
#   bash bench/gpu.sh --cpu-smoke            # the same steps on the CPU, MB for GB, into a temporary folder: not speed
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
smoke=; [ "${1:-}" = --cpu-smoke ] && { smoke=1; shift; }
parts=" ${*:-tests checkpoint resume fit} "
if [ -n "$smoke" ]; then dev=cpu gpu=cpu sizes=1,2 mb=10 reps=1 fit=(--cpu-smoke) results=${GPU_RESULTS:-$(mktemp -d)}
else dev=cuda gpu=gpu sizes=1000,4000 mb=2000 reps=3 fit=(--gpu --reps 3 --budget 100) results=${GPU_RESULTS:-bench/results}; fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
failed=0
step() { case $parts in *" $1 "*) ;; *) return;; esac; local s=$2; shift 2
         echo "== $*"; timeout -k 10 "$s" "$@" || { echo "gpu.sh: exit $? from: $*"; failed=1; }; }
step tests 280 python3 -m pytest tests/test_cuda.py -v -rA -p no:cacheprovider
step checkpoint 200 python3 bench/checkpoint_bench.py --device $dev --methods memcpy,ddpsafe_async,memory_tier,dcp_async,torch_save \
     --sizes $sizes --reps $reps --quiet 0 --dir "$(mktemp -d)" --out "$results"
step resume 60 python3 bench/resume_bench.py --device $dev --sizes $mb --reps $reps --quiet 0 --out "$results"
step fit 130 python3 bench/fit_bench.py "${fit[@]}" --host --modes async,memory --out "$results/fit_${gpu}_host.json"
step fit 130 python3 bench/fit_bench.py "${fit[@]}" --modes async,memory --out "$results/fit_$gpu.json"
echo "gpu.sh: the JSON files are in $results"
[ -n "${OUT:-}" ] && cp "$results"/checkpoint_$dev* "$results"/resume*$dev* "$results"/fit_${gpu}*.json "$OUT"/ 2>/dev/null
exit $failed
