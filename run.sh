#!/usr/bin/env bash
# The two quick-start commands:  ./run.sh main   (the main job on the offline corpus)
#                                ./run.sh test   (the whole test suite)
# Both create .venv in the checkout on first use and reuse it afterwards. Packages come
# from requirements.lock (the exact versions the tests passed with) plus torch 2.13.0 in
# one of two builds, chosen explicitly:
#   PACKAUDIT_TORCH=cpu   the CPU-only build (torch==2.13.0+cpu); never downloads CUDA libraries
#   PACKAUDIT_TORCH=cuda  the default CUDA build of torch==2.13.0
#   PACKAUDIT_TORCH=auto  (default) cuda when `nvidia-smi` lists a GPU, else cpu
# The CPU build is published on PyTorch's own wheel index, not on the default one: if pip
# cannot find it, point pip at that index (PIP_EXTRA_INDEX_URL=...) and run again.
# Reinstalls happen only when requirements.lock or the torch choice change.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: Python 3.11 or newer is needed ($PY is $("$PY" --version 2>&1)); set PYTHON=python3.11" >&2
  exit 2
fi
variant=${PACKAUDIT_TORCH:-auto}
if [ "$variant" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then variant=cuda; else variant=cpu; fi
fi
case "$variant" in
  cpu) torch_req="torch==2.13.0+cpu" ;;
  cuda) torch_req="torch==2.13.0" ;;
  *) echo "error: PACKAUDIT_TORCH must be cpu, cuda or auto (got '$variant')" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=".venv/.deps-$variant-$(sha256sum requirements.lock | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing requirements.lock and $torch_req into .venv (first run only)" >&2
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock "$torch_req"; then
    echo "error: could not install $torch_req; for the CPU build add PyTorch's CPU wheel index to pip" \
         "(PIP_EXTRA_INDEX_URL), or choose PACKAUDIT_TORCH=cuda" >&2
    exit 1
  fi
  rm -f .venv/.deps-* && touch "$stamp"
fi
cmd=${1:-}
shift || true
case "$cmd" in
  main) exec .venv/bin/python main.py "$@" ;;
  test) exec .venv/bin/python -m pytest "$@" ;;
  *) echo "usage: ./run.sh main [options] | ./run.sh test [pytest options]" >&2; exit 2 ;;
esac
