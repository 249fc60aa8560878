#!/usr/bin/env bash
# Set up .venv (tools/setup.sh), then build the docs site into docs/ (no Quarto needed):
# the notebooks, processed by nbdev, become markdown in _docs_build/md/, then `mkdocs build --strict`.
# `bash tools/docs.sh --serve` serves it on http://127.0.0.1:8000/ddpsafe/ instead. With Quarto, `nbdev-docs` works too (into _docs/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/python tools/docs.py "$@"
