#!/usr/bin/env bash
# Set up .venv (tools/setup.sh), then run every test: the notebooks with nbdev-test, then tests/ with pytest.
# DDPSAFE_FULL=1 runs the long race counts (50 attempts each) instead of the short ones.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
nbdev-test --n-workers 2 --timing
python -m pytest tests -ra -p no:cacheprovider "$@"
