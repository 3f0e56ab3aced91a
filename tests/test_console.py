"""The console: every command line answers --help without importing torch, and train.py refuses a
missing --config without it; progress bars stay quiet off a terminal; the main job's stage times; every
command line's process ends without the interpreter's last scans of every object (console/shutdown.py)."""
import ast
import importlib
import io
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import one_line_error
from console.terminal import for_terminal

ROOT = Path(__file__).resolve().parents[1]
# scripts that parse their arguments before their module-level import of torch: only a run as a script shows it
EARLY_PARSERS = ("train.py", "training/bench.py")
NOT_CODE = {".venv", "tests", "build", "docs", "mutants", ".git"}


def _imports(script, *args):
    r = subprocess.run([sys.executable, "-X", "importtime", script, *args], capture_output=True, text=True, cwd=ROOT)
    mods = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, mods


@pytest.mark.parametrize("script", EARLY_PARSERS)
def test_early_parsers_answer_help_without_torch(script):
    r, mods = _imports(script, "--help")
    assert r.returncode == 0 and "--config" in r.stdout
    assert "torch" not in mods and "numpy" not in mods


def command_lines():
    """Every other file that runs as a command line (it has `if __name__ == "__main__"`), relative to ROOT."""
    files = [p for p in ROOT.glob("*.py")] + [p for d in ROOT.iterdir() if d.is_dir() and d.name not in NOT_CODE
                                              for p in d.rglob("*.py")]
    return sorted(str(p.relative_to(ROOT)) for p in files
                  if str(p.relative_to(ROOT)) not in EARLY_PARSERS and 'if __name__ == "__main__":' in p.read_text())


# In one process: each command line's module loaded as `python -m` or `python FILE` loads it, then its main()
# given --help; the first after which torch is loaded is named.
HELP_PROBE = """
import importlib, importlib.util, sys
from pathlib import Path
root = Path(sys.argv[1])
for rel in sys.argv[2:]:
    path = root / rel
    if path.parent == root or (path.parent / "__init__.py").exists():
        mod = importlib.import_module(".".join(Path(rel).with_suffix("").parts))
    else:  # a script folder (queue/, scripts/, install/), not a package
        spec = importlib.util.spec_from_file_location("cli_" + path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    sys.argv = [str(path), "--help"]
    try:
        mod.main()
    except SystemExit as e:
        assert e.code in (0, None), (rel, e.code)
    if "torch" in sys.modules:
        print("IMPORTS TORCH:", rel)
        break
"""


def test_every_command_line_answers_help_without_torch():
    names = command_lines()
    assert {"main.py", "prepare.py", "eval/__main__.py", "queue/run_queue.py", "gpu_check/__main__.py"} <= set(names)
    r = subprocess.run([sys.executable, "-c", HELP_PROBE, str(ROOT), *names], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "IMPORTS TORCH:" not in r.stdout, [ln for ln in r.stdout.splitlines() if ln.startswith("IMPORTS TORCH:")]


def test_train_without_config_refuses_in_one_line():
    r, mods = _imports("train.py")
    msg = [x for x in r.stderr.splitlines() if not x.startswith("import time:")]
    assert r.returncode == 2 and len(msg) == 1 and "--config" in msg[0]
    assert "torch" not in mods


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bars_are_quiet_off_a_terminal():
    from console.progress import QUIET_INTERVAL_S, bar

    out = io.StringIO()
    log = bar(total=100, file=out)
    assert log.mininterval == QUIET_INTERVAL_S  # a log gets a line at most every 30 s
    before = out.getvalue()
    for k in range(5):
        log.set_postfix({"loss": k})  # a postfix change must not force a redraw into a log
    assert out.getvalue() == before
    log.close()
    term = bar(range(3), file=_Tty())
    assert term.mininterval < 1  # a terminal keeps tqdm's live redraw


def test_every_progress_bar_goes_through_the_console_helper():
    """A bar made with tqdm itself redraws every step in a log file: only console/progress.py imports it."""
    files = [p for p in ROOT.glob("*.py")] + [p for d in ROOT.iterdir() if d.is_dir() and d.name not in NOT_CODE
                                              for p in d.rglob("*.py")]
    direct = [str(p.relative_to(ROOT)) for p in files
              if re.search(r"^\s*(from tqdm\b|import tqdm\b)", p.read_text(), re.M)]
    assert direct == ["console/progress.py"]


def test_stage_clock_records_each_stage(tmp_path):
    from main import StageClock

    c = StageClock(tmp_path)
    c.start("prepare")
    c.start("audit")  # starting a stage ends the previous one
    c.stop()
    times = json.loads((tmp_path / "stage_times.json").read_text())
    assert set(times) == {"prepare", "audit"} and all(v >= 0 for v in times.values())
    # a rerun: a stage that finds its results finished keeps the time of the work that made them
    (tmp_path / "stage_times.json").write_text(json.dumps({"prepare": 30.0, "audit": 12.5}))
    c = StageClock(tmp_path)
    for name in ("prepare", "audit", "train"):
        c.start(name)
        c.keep()  # train kept, but never timed before: its time is recorded
    c.start("eval")
    c.start("summary")
    c.drop()  # the summary stage: it writes the others' times before its own is over
    c.stop()
    times = json.loads((tmp_path / "stage_times.json").read_text())
    assert times["prepare"] == 30.0 and times["audit"] == 12.5 and set(times) == {"prepare", "audit", "train", "eval"}


def test_a_figure_link_alone_on_its_line_prints_as_its_file_name():
    md = "# T\n\n![learning curves](learning_curves.png)\n\nsee ![x](y.png) inline\n![a](b c.png)\n"
    assert for_terminal(md) == ("# T\n\n(figure: learning_curves.png)\n\nsee ![x](y.png) inline\n![a](b c.png)\n")


@pytest.mark.parametrize("args,needle", [(["--config", "/nonexistent.json"], "/nonexistent.json: config file not found"),
                                         (["--part", "update-cost", "--repeats", "0"], "--repeats 0")])
def test_the_training_benchmark_refuses_bad_input_before_any_part(monkeypatch, capsys, args, needle):
    from training import bench  # here, not at the top: this file's other tests check imports that exclude torch

    for part in ("update_cost", "host_memory"):
        monkeypatch.setattr(bench, part, lambda *a: pytest.fail("a part ran before the arguments were checked"))
    one_line_error(capsys, bench.main(args), needle)


def product_command_lines():
    """The command lines a researcher runs: the console scripts pyproject names (module:main) and the queue's two
    scripts, as files relative to ROOT."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"].values()
    modules = [s.split(":")[0] for s in scripts]
    files = [m.replace(".", "/") + ".py" for m in modules]
    return sorted({f if (ROOT / f).exists() else f[:-3] + "/__init__.py" for f in files}
                  | {"queue/run_queue.py", "queue/study.py"})


def test_every_command_line_skips_the_interpreters_last_collections_at_exit():
    """Each product command line's main() begins with skip_final_collections(): a process that imported torch
    spends 0.4 s (0.9 s with torch._dynamo) of its exit on collections that only free what it gives back anyway."""
    names = product_command_lines()
    assert {"main.py", "train.py", "audit/__main__.py", "eval/official.py", "queue/study.py"} <= set(names), names
    missing = []
    for rel in names:
        tree = ast.parse((ROOT / rel).read_text())
        main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
        body = [n for n in main.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        first = body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
                and getattr(first.value.func, "id", None) == "skip_final_collections"):
            missing.append(rel)
    assert not missing, missing


def test_at_exit_what_is_alive_is_frozen_before_the_interpreters_last_collections():
    """atexit runs its handlers last in, first out: a probe registered before the call runs after its handler, and
    sees the heap frozen. A second call registers nothing more. Without the call, nothing is frozen."""
    probe = ("import atexit, gc\n"
             "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
             "from console.shutdown import skip_final_collections\n"
             "import sys\n"
             "if sys.argv[1] == 'call':\n"
             "    before = atexit._ncallbacks()\n"
             "    skip_final_collections(); skip_final_collections()\n"
             "    print('registered:', atexit._ncallbacks() - before)\n")
    called = subprocess.run([sys.executable, "-c", probe, "call"], capture_output=True, text=True, cwd=ROOT)
    assert called.stdout.split("\n")[:2] == ["registered: 1", "frozen at exit: True"], (called.stdout, called.stderr)
    plain = subprocess.run([sys.executable, "-c", probe, "no"], capture_output=True, text=True, cwd=ROOT)
    assert plain.stdout.strip() == "frozen at exit: False", (plain.stdout, plain.stderr)


@pytest.mark.parametrize("module, inner, argv, kept", [
    ("eval.__main__", "prepare", ["--runs", "R", "--exploratory", "--out", "E"], "the statistics scored so far"),
    ("comparison.run_six", "train_all", ["--out", "S", "steps=2"], "each finished or with its checkpoints"),
    ("prepare", "prepare", ["--data-dir", "D"], "what was finished is kept"),
])
def test_ctrl_c_on_a_resumable_command_is_one_line_naming_the_command_that_goes_on(module, inner, argv, kept,
                                                                                   monkeypatch, capsys):
    """Each picks up where it stopped when run again; a Ctrl-C printed Python's KeyboardInterrupt traceback."""
    mod = importlib.import_module(module)

    def stop(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, inner, stop)
    rc = mod.main(argv)
    err = capsys.readouterr().err
    assert rc == 130 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("interrupted: ") and kept in err and f" {' '.join(argv)}` to go on" in err, err
