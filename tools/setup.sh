#!/usr/bin/env bash
# Create .venv, the test environment: ddpsafe with its dev tools, once. Idempotent: a second run only checks.
# TORCH_SPEC picks torch; the default, torch 2.13.0, is what CI's tests run on (its test machines hold it as a CPU wheel
# on their disk; elsewhere pip takes PyPI's build of it). No torchvision: fastai.vision runs in .venv-vision.
# Installing torch and ddpsafe in ONE pip call keeps pip from resolving `torch` on its own
# (which would pull a multi-GB CUDA build on a machine without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
stamp=.venv/.ddpsafe-installed
want="$TORCH_SPEC $(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/pip install -q --disable-pip-version-check "$TORCH_SPEC" -e ".[dev]"
  echo "$want" > "$stamp"
fi
