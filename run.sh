#!/usr/bin/env bash
# The two quick-start commands:  ./run.sh main   (the main job on the offline corpus)
#                                ./run.sh test   (the whole test suite)
# Both create .venv in the checkout on first use and reuse it afterwards; dependencies
# come from pyproject.toml and are reinstalled only when that file changes.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=".venv/.deps-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  # torch is pinned in pyproject.toml; on a CPU machine the pin resolves to the CPU wheel.
  .venv/bin/python - <<'PYEOF'
import subprocess, sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = p["dependencies"] + p["optional-dependencies"]["test"]
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *deps])
PYEOF
  rm -f .venv/.deps-* && touch "$stamp"
fi
cmd=${1:-}
shift || true
case "$cmd" in
  main) exec .venv/bin/python main.py "$@" ;;
  test) exec .venv/bin/python -m pytest "$@" ;;
  *) echo "usage: ./run.sh main [options] | ./run.sh test [pytest options]" >&2; exit 2 ;;
esac
