#!/usr/bin/env bash
# Set up .venv (tools/setup.sh) and .venv-vision (tools/setup_vision.sh: torchvision, for tests/test_apps.py's vision run),
# then run every test: the notebooks with nbdev-test, then tests/ with pytest.
# Tests marked slow (the long stress runs: full attempt counts, more stop points, 4 ranks) are skipped by default;
# DDPSAFE_FULL=1 runs them too (CI: DDPSAFE_FULL=1 bash .ci/run). Extra arguments go to pytest (e.g. -m slow).
# Most tests wait on other processes (ranks, launchers, timeouts), so two test files at once use 2 cores better than one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/setup_vision.sh
export PATH="$PWD/.venv/bin:$PATH"
# The pages that show every code cell they have run in tests/test_howtos.py as a reader runs them; nbdev-test skips them
# (computed first, so that a failure stops here: an empty regex would skip every notebook)
shown_whole=$(python tools/howtos.py --whole-re)
nbdev-test --n-workers 2 --timing --skip-file-re "$shown_whole"
# The test files on DDPSAFE_TEST_WORKERS pytest-xdist workers (default 2), each file's tests on one worker in order
# (--dist loadfile: a file's module fixtures, such as test_s3's S3 server, start once); 1 runs them in this process.
workers=${DDPSAFE_TEST_WORKERS:-2}
par=(); [ "$workers" -gt 1 ] && par=(-n "$workers" --dist loadfile)
python -m pytest tests -ra -p no:cacheprovider --durations=40 "${par[@]}" "$@"
