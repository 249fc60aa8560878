#!/usr/bin/env bash
# Set up .venv (tools/setup.sh), then run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/ddpsafe-demo "$@"
