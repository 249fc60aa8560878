#!/usr/bin/env bash
# The ends of the version range that pyproject.toml declares: `ddpsafe-demo` and a core subset of the tests (saves and
# their commit, resume bit for bit, SIGTERM, export) in an environment with a given torch and torchvision.
#
#   bash tools/check_versions.sh setup VENV "torch==2.8.0 torchvision==0.23.0" [PACKAGE]   # make VENV, once (idempotent)
#   bash tools/check_versions.sh check VENV                                                 # the demo and the tests, in VENV
#
# setup installs torch, torchvision and ddpsafe (PACKAGE: a built wheel, or `.` by default) in ONE pip call, from PyPI:
# find-links points at an empty folder, so that pip takes PyPI's torch build (which runs on the CPU too) and not a CPU
# wheel lying on this machine's disk, beside which PyPI's torchvision does not import. About 6 GB and a few minutes.
# check runs the tests from this clone with VENV's python; any environment with ddpsafe and pytest will do
# (CI: .ci/oldest-venv for the oldest torch accepted, .venv-vision for the newest that pip resolves).
set -euo pipefail
cd "$(dirname "$0")/.."
CORE_TESTS=(   # one test a guarantee, so that both ends together take minutes
  "tests/test_commit.py::test_crash_between_write_and_rename"      # a save is complete or invisible
  "tests/test_checkpoint.py::test_resume_bit_identical[fit-stops-5]" # stopped (switch, kill) and resumed: bit for bit
  "tests/test_preempt.py::test_default_poll_signal_stop_and_resume[no-accum]" # SIGTERM to one rank: every rank saves one step, resumes
  "tests/test_export.py::test_export_loads_without_ddpsafe"       # learn.export loads without ddpsafe
  "tests/test_cli.py::test_status_after_a_real_run"                 # ddpsafe-status after real runs
)

setup() {
  local venv=$1 spec=$2 pkg=${3:-.}
  local stamp=$venv/.ddpsafe-installed want
  want="$spec $(sha1sum pyproject.toml | cut -c1-12) $(basename "$pkg")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  rm -rf "$venv" && python3 -m venv "$venv"
  local nowheels; nowheels=$(mktemp -d)
  # shellcheck disable=SC2086
  PIP_FIND_LINKS="$nowheels" "$venv/bin/pip" install -q --disable-pip-version-check --no-compile $spec "$pkg" \
    "pytest>=8" "pytest-timeout>=2.3"
  rmdir "$nowheels"
  echo "$want" > "$stamp"
}

check() {
  local venv=$1 t=$SECONDS
  "$venv/bin/python" -c 'import pytest, pytest_timeout' 2>/dev/null \
    || "$venv/bin/pip" install -q --disable-pip-version-check "pytest>=8" "pytest-timeout>=2.3"   # .venv-vision has no dev tools
  "$venv/bin/python" -c 'import torch, torchvision, fastai, ddpsafe
print("versions: torch", torch.__version__, "| torchvision", torchvision.__version__, "| fastai", fastai.__version__, "| ddpsafe", ddpsafe.__version__)'
  "$venv/bin/ddpsafe-demo" | tee "$venv/demo.txt" | tail -3
  grep -q 'identical, bit for bit' "$venv/demo.txt" || { echo "ddpsafe-demo in $venv: the resumed run differs from its twin"; return 1; }
  # the venv's own pytest folder: CI runs the two ends at once, and pytest prunes old folders in a shared one
  "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra --basetemp="$venv/pytest-tmp" "${CORE_TESTS[@]}"
  echo "check_versions: $venv passed in $((SECONDS - t)) s"
}

case ${1:-} in
  setup) shift; setup "$@" ;;
  check) shift; check "$@" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
