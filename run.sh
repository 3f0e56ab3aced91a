#!/usr/bin/env bash
# The two quick-start commands:  ./run.sh main   (the main job on the offline corpus)
#                                ./run.sh test   (the whole test suite)
# and ./run.sh setup, which only installs (then `source .venv/bin/activate` for the command lines).
# Both create .venv in the checkout on first use and reuse it afterwards. Packages come
# from requirements.lock (the exact versions the tests passed with) and requirements-audit.lock
# (the packing libraries the audit runs: TRL, OLMo-core, torchtune, torchtitan), requirements-ray.lock
# (Ray core for --engine ray; the tests run it on a local instance), plus torch
# 2.13.0 in the build that install/torch_requirement.py derives from the platform and PACKAUDIT_TORCH
# (and, apart, requirements-real-libs.lock into .venv/real-libs: see below):
#   auto   (default) cuda on Linux when `nvidia-smi` lists a GPU, else cpu
#   cpu    Linux: torch==2.13.0+cpu from PyTorch's CPU wheel index (no CUDA libraries);
#          macOS: the default build
#   cuda   the default index's CUDA build of torch==2.13.0 (Linux)
#   cu126  (or any cuXXX) that CUDA version's build from PyTorch's index
# If PyTorch's index cannot be reached, the default index's torch==2.13.0 is installed and a
# one-line note says so. Reinstalls happen only when a lock file or the choice change.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: Python 3.11 or newer is needed ($PY is $("$PY" --version 2>&1)); set PYTHON=python3.11" >&2
  exit 2
fi
variant=${PACKAUDIT_TORCH:-auto}
"$PY" install/torch_requirement.py --choice "$variant" >/dev/null || exit 2  # a bad choice: one line, before any install
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
locks=(requirements.lock requirements-audit.lock requirements-ray.lock)
real_libs=requirements-real-libs.lock
lock_hash=$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(b"".join(open(f, "rb").read() for f in sys.argv[1:])).hexdigest()[:16])' "${locks[@]}" "$real_libs")  # macOS has no sha256sum
stamp=".venv/.deps-$variant-$lock_hash"
if [ ! -f "$stamp" ]; then
  read -r torch_req torch_index <<<"$("$PY" install/torch_requirement.py --choice "$variant" --probe)"
  echo "installing ${locks[*]} and $torch_req${torch_index:+ (from $torch_index)} into .venv (first run only)" >&2
  # one pip call for the locks and torch: every version is pinned, so pip refuses a conflict rather than move torch or numpy.
  # One warning of pip's is left out, harmless and said once for each huggingface-hub release pip looks at (six
  # lines on 2026-12-07): torchtune 0.6.1 asks for huggingface_hub[hf_transfer], an extra hub 1.x no longer has;
  # the lock pins hub 1.33.0, and hf_transfer only speeds up downloads, which the audit never makes
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock -r requirements-audit.lock \
       -r requirements-ray.lock "$torch_req" \
       ${torch_index:+--extra-index-url "$torch_index"} \
       2> >(grep -v "does not provide the extra 'hf_transfer'" >&2); then
    echo "error: could not install $torch_req${torch_index:+ from $torch_index}; see pip's message above," \
         "or choose another build with PACKAUDIT_TORCH (cpu, cuda, cu126, ...)" >&2
    exit 1
  fi
  # llm-foundry, LLaMA-Factory and axolotl, whose packing code the tests check the audit's rules against: their pins
  # would move torch or numpy, so their three wheels go alone, without dependencies, into a folder off the import path
  rm -rf .venv/real-libs
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --only-binary :all: \
       --target .venv/real-libs -r "$real_libs"; then
    echo "error: could not install $real_libs into .venv/real-libs; see pip's message above" >&2
    exit 1
  fi
  rm -f .venv/.deps-* && touch "$stamp"
fi
cmd=${1:-}
shift || true
case "$cmd" in
  # torch's version from its installed metadata: importing torch to ask would take a second or two
  setup) echo "ready: .venv has the locks and $("$PWD/.venv/bin/python" -c 'from importlib.metadata import version; print("torch", version("torch"))'); source .venv/bin/activate to use the command lines" ;;
  main) exec .venv/bin/python main.py "$@" ;;
  # two test processes, one per core (PACKAUDIT_TEST_WORKERS=0: one process); whole files per process,
  # so a file's session fixtures (a prepared corpus, a calibrated queue) are built once; the slowest files
  # first, in tests/conftest.py's order
  # bytecode caches on even where the environment turns them off (PYTHONDONTWRITEBYTECODE): pytest otherwise
  # rewrites every test module's asserts again in each process, about 5 s a run on 2 cores (__pycache__ is ignored)
  test) PYTHONDONTWRITEBYTECODE= exec .venv/bin/python -m pytest -n "${PACKAUDIT_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@" ;;
  *) echo "usage: ./run.sh setup | ./run.sh main [options] | ./run.sh test [pytest options]" >&2; exit 2 ;;
esac
