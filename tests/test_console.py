"""The console: train.py answers --help and refuses a missing --config without importing torch;
progress bars stay quiet off a terminal; the main job's stage times."""
import io
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(*args):
    r = subprocess.run([sys.executable, "-X", "importtime", "train.py", *args], capture_output=True, text=True, cwd=ROOT)
    mods = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, mods


def test_train_help_without_torch():
    r, mods = _imports("--help")
    assert r.returncode == 0 and "--config" in r.stdout
    assert "torch" not in mods and "numpy" not in mods


def test_train_without_config_refuses_in_one_line():
    r, mods = _imports()
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


def test_stage_clock_records_each_stage(tmp_path):
    from main import StageClock

    c = StageClock(tmp_path)
    c.start("prepare")
    c.start("audit")  # starting a stage ends the previous one
    c.stop()
    times = json.loads((tmp_path / "stage_times.json").read_text())
    assert set(times) == {"prepare", "audit"} and all(v >= 0 for v in times.values())
