#!/usr/bin/env bash
# Set up a local virtual environment (.venv) with megxla and its test extras, then run the test suite.
# PYTHON=python3.12 bash scripts/test.sh: the same with that interpreter, in .venv-3.12 (pip gives each Python the
# newest jax it supports: 0.10 on 3.11, 0.11 on 3.12 and 3.13).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
if [ -n "${PYTHON:-}" ]; then VENV=.venv-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])'); fi
if [ ! -x "$VENV/bin/python" ]; then "${PYTHON:-python3}" -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e ".[test,demo]"
# One test process per core, up to 8 (pytest-xdist; MEGXLA_TEST_WORKERS=0 runs them in this one): on the 2-core CI
# machine the suite takes ~12 min instead of ~20. ``loadfile`` keeps a file's tests in one process, in order.
WORKERS=${MEGXLA_TEST_WORKERS:-$(n=$(nproc); echo $(( n > 8 ? 8 : n )))}
exec "$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadfile "$@"
