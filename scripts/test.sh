#!/usr/bin/env bash
# Set up a local virtual environment (.venv) with megxla and its test extras, then run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[test,demo]"
exec .venv/bin/python -m pytest "$@"
