#!/usr/bin/env bash
# Create .venv-vision and install ddpsafe with torch and torchvision in it, once: the README's install, pinned to what
# CI tests; the demo (tools/demo.sh), the README's train.py and tests/test_apps.py's vision runs use it. Idempotent:
# a second run only checks. fastai.vision needs torchvision, and PyPI's torchvision does not import beside the local CPU
# torch wheel that tools/setup.sh installs. It does beside a torch build of its own release, which runs on the CPU too:
# on x86_64 torch 2.14.1 with torchvision 0.29.1 (CUDA builds, which pip takes from this machine's disk where they lie
# there: no download), elsewhere torch 2.9.1 with torchvision 0.24.1 (CPU builds). VISION_SPEC overrides the choice;
# torch, torchvision and ddpsafe go in ONE pip call, as in setup.sh, so pip never resolves torch on its own.
# Where PyTorch's CPU index answers (TORCH_INDEX; a laptop with the internet), pip takes the same releases' CPU builds
# from it, as the README's first install does: about 1.4 GB installed instead of 5.8 GB. TORCH_INDEX=none: PyPI's alone.
set -euo pipefail
cd "$(dirname "$0")/.."
case "$(uname -m)" in
  x86_64) default_spec="torch==2.14.1 torchvision==0.29.1" ;;
  *)      default_spec="torch==2.9.1 torchvision==0.24.1" ;;
esac
VISION_SPEC="${VISION_SPEC:-$default_spec}"
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
index=()
if [ "$TORCH_INDEX" != none ] && python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=5)' "$TORCH_INDEX" 2>/dev/null; then
  index=(--extra-index-url "$TORCH_INDEX")
fi
if [ ! -x .venv-vision/bin/python ]; then python3 -m venv .venv-vision; fi
stamp=.venv-vision/.ddpsafe-installed
want="$VISION_SPEC ${index[*]} $(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # --no-compile: no .pyc for torch's thousands of files (Python compiles what it imports)
  # shellcheck disable=SC2086
  .venv-vision/bin/pip install -q --disable-pip-version-check --no-compile "${index[@]}" $VISION_SPEC -e .
  echo "$want" > "$stamp"
fi
