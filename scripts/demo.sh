#!/usr/bin/env bash
# Set up .venv with megxla and the demo extras, then train the digits ConvNet with one compiled XLA step.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[demo]"
exec .venv/bin/python examples/digits.py "$@"
