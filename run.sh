#!/usr/bin/env bash
# Creates (once) and reuses a virtual environment in .venv, then runs the demo or the tests.
#   ./run.sh demo [ms-heron demo options]    tune an int8 GEMM on this CPU, compare with ONNX Runtime
#   ./run.sh test [pytest options]           lint (ruff) and run the test suite
set -euo pipefail
cd "$(dirname "$0")"

venv="${MS_HERON_VENV:-.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; assert sys.version_info >= (3, 10), "ms_heron needs Python >= 3.10"'
  "$python" -m venv "$venv"
fi
stamp="$venv/.ms-heron-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # pip and setuptools talk a lot (an editable install's notice, index warnings): kept in a log, shown on failure
  log="$venv/install.log"
  if ! { "$venv/bin/python" -m pip install --quiet --upgrade pip && "$venv/bin/python" -m pip install --quiet -e ".[test,bench]"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "run.sh: installing ms_heron's dependencies failed (above; the full log is $log)" >&2
    exit 1
  fi
  touch "$stamp"
fi

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
  demo) exec "$venv/bin/ms-heron" demo "$@" ;;
  test)
    "$venv/bin/ruff" check --quiet . || { echo "ruff: fix the lint above (./.venv/bin/ruff check --fix .)" >&2; exit 1; }
    exec "$venv/bin/python" -m pytest "$@" ;;
  *) echo "usage: ./run.sh demo [options] | ./run.sh test [pytest options]" >&2; exit 2 ;;
esac
