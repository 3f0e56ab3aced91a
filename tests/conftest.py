import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one test process per core (./run.sh test runs two): a second intra-op thread per process
    # would only oversubscribe the cores. Set before any test module imports torch; subprocesses inherit it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]  # on sys.path through pyproject's pytest `pythonpath`

from training.device import keep_freed_host_memory  # noqa: E402 - after OMP_NUM_THREADS, which torch reads once

keep_freed_host_memory()  # as every command line does on CPU: the tests' in-process training runs take half the time


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A small offline corpus prepared once: 3 shards (2 train + val), vocab 400."""
    import prepare

    d = tmp_path_factory.mktemp("data")
    rc = prepare.main(["--data-dir", str(d), "--max-files", "120", "--shards", "3",
                       "--row-group-size", "150", "--vocab-size", "400"])
    assert rc == 0
    return d


@pytest.fixture
def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env


def queue_script(name):
    """A queue command line (queue/NAME.py) loaded as a module, to call its main() in-process
    exactly as `python queue/NAME.py` runs it; queue/ itself is never importable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"queue_cli_{name}", ROOT / "queue" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_line_error(capsys, rc, *needles):
    """A refusal as the command lines promise it: exit status 2, one `error:` line holding every
    needle, no traceback."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
