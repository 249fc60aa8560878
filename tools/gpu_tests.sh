#!/usr/bin/env bash
# The GPU tests (tests/test_cuda.py), in one call on a machine with CUDA (CI has none: there they are skipped).
# The device image has torch and accelerate but not fastai: wheels carried in .whl (Python 3.12, see the benchmarks page)
# are installed into a folder of their own first. The log goes to $OUT/gpu-tests.log where OUT is set.
#   bash tools/gpu_tests.sh                  # every GPU test
#   bash tools/gpu_tests.sh -k rerun         # extra arguments go to pytest
set -u
cd "$(dirname "$0")/.."
site=$(mktemp -d)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || exit 1
fi
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, fastai, accelerate; print('torch', torch.__version__, '| fastai', fastai.__version__, '| accelerate', accelerate.__version__, '| cuda', torch.cuda.is_available())"
cd tests && timeout -k 10 "${GPU_TEST_SECONDS:-500}" python3 -m pytest test_cuda.py -ra -s -p no:cacheprovider --durations=10 "$@" 2>&1 | tee "${OUT:-/tmp}/gpu-tests.log"
