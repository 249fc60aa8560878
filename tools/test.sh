#!/usr/bin/env bash
# Set up .venv (tools/setup.sh) and .venv-vision (tools/setup_vision.sh: torchvision, for tests/test_apps.py's vision run),
# then run every test: the notebooks with nbdev-test, then tests/ with pytest.
# Tests marked slow (the long stress runs: full attempt counts, more stop points, 4 ranks) are skipped by default;
# DDPSAFE_FULL=1 runs them too (CI: DDPSAFE_FULL=1 bash .ci/run). Extra arguments go to pytest (e.g. -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/setup_vision.sh
export PATH="$PWD/.venv/bin:$PATH"
nbdev-test --n-workers 2 --timing
python -m pytest tests -ra -p no:cacheprovider --durations=40 "$@"
