#!/usr/bin/env bash
# Create .venv-vision and install ddpsafe with torchvision in it, once (for tests/test_apps.py's vision run). Idempotent:
# a second run only checks. fastai.vision needs torchvision, and PyPI's torchvision does not import beside the local CPU
# torch wheel that tools/setup.sh installs; it does beside PyPI's own torch build (which also runs on CPU). So pip's
# find-links point at an empty folder (.nowheels), and torch, torchvision and ddpsafe go in ONE pip call, as in setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VISION_SPEC="${VISION_SPEC:-torch==2.13.0 torchvision==0.28.0}"
if [ ! -x .venv-vision/bin/python ]; then python3 -m venv .venv-vision; fi
stamp=.venv-vision/.ddpsafe-installed
want="$VISION_SPEC $(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  mkdir -p .nowheels
  # shellcheck disable=SC2086
  PIP_FIND_LINKS="$PWD/.nowheels" .venv-vision/bin/pip install -q --disable-pip-version-check $VISION_SPEC -e .
  echo "$want" > "$stamp"
fi
