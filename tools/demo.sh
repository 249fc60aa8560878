#!/usr/bin/env bash
# Set up .venv-vision (tools/setup_vision.sh: torch, torchvision and ddpsafe in one pip call, as the README installs),
# then run the demo there: with PyTorch's CPU builds (about 1.4 GB) where its CPU index answers, else PyPI's (5.8 GB). The README's train.py runs in the same environment.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_vision.sh
exec .venv-vision/bin/ddpsafe-demo "$@"
