"""The standard-library checkers answer in time that grows like their input, or refuse in one
line what they cannot check in bounded time (issue 30): the largest buffer on a real audit
export, one 40 MB refill line of 20 M lengths, a 400-digit histogram length. The subprocess
timeout is a guard against a hang only; the times are measured by audit/bench.py."""
import subprocess
import sys

import numpy as np
import pytest

from audit.events import write_csv
from audit.replay import Replay
from conftest import ROOT
from loaders.stream import DocumentStream

CHECKER = [sys.executable, "-I", "-S", str(ROOT / "checkers" / "packing_checker.py")]
HIST = [sys.executable, "-I", "-S", str(ROOT / "checkers" / "check_length_histogram.py")]
GUARD_S = 120


def run(cmd, *args):
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=GUARD_S)


def refused(r):
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return errors[0]


def test_largest_buffer_on_an_audit_export_is_checked(tmp_path):
    # 2,000 documents per pass and B = 1,000,000: the buffer fills over 500 passes (a million
    # arrivals) before the first selection; the literal list scan took minutes per selection
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 300, 2000)
    lengths[::50] = 700
    stream = DocumentStream.from_lengths(lengths, refill_docs=128)
    B = 1_000_000
    rep = Replay(stream, "original", 40, 257, B)
    write_csv(rep.events, tmp_path / "events.csv")
    (tmp_path / "lengths.txt").write_text(
        "".join(" ".join(map(str, lengths[a:b])) + "\n" for a, b in zip(stream.refills[:-1], stream.refills[1:])))
    r = run(CHECKER, "--events", tmp_path / "events.csv", "--lengths", tmp_path / "lengths.txt",
            "--row-capacity", 257, "--buffer", B, "--rows", 40)
    assert r.returncode == 0 and r.stdout.startswith(f"match: {len(rep.events)} events, 40 rows"), r.stdout + r.stderr
    # and a changed event is still found at that size
    text = (tmp_path / "events.csv").read_text().splitlines()
    cells = text[5].split(",")
    cells[2] = str(int(cells[2]) + 1)  # span_start of event 4
    text[5] = ",".join(cells)
    (tmp_path / "bad.csv").write_text("\n".join(text) + "\n")
    r = run(CHECKER, "--events", tmp_path / "bad.csv", "--lengths", tmp_path / "lengths.txt",
            "--row-capacity", 257, "--buffer", B)
    assert r.returncode == 1 and "MISMATCH at event 4" in r.stdout, r.stdout + r.stderr


def test_one_40mb_refill_line_is_refused_in_one_line(tmp_path):
    (tmp_path / "one_line.txt").write_text("7 " * 20_000_000 + "\n")  # 40 MB, 20 M lengths, one refill
    (tmp_path / "events.csv").write_text(
        "source_id,span_start,emitted,discarded,kind,lead_bos,source_len,row,row_offset,target_offset\n"
        "0,0,7,0,fit,0,7,0,0,0\n")
    err = refused(run(CHECKER, "--events", tmp_path / "events.csv", "--lengths", tmp_path / "one_line.txt",
                      "--row-capacity", 7))
    assert "line 1 holds more than 1,000,000 lengths" in err


def test_a_400_digit_histogram_length_is_refused(tmp_path):
    h = tmp_path / "h.csv"
    h.write_text(f"length,count\n5,1\n{'9' * 400},1\n")
    err = refused(run(HIST, h))
    assert "line 3" in err and "400 digits" in err
    h.write_text(f"length,count\n5,{'9' * 30}\n")
    assert "count has 30 digits" in refused(run(HIST, h))
    h.write_text(f"length,count\n5,1\n{2**63 - 1},1\n")  # the largest 64-bit length is still a length
    assert run(HIST, h).returncode == 0


def test_lengths_are_counted_and_refused_before_any_is_parsed(tmp_path, monkeypatch, capsys):
    """A file past the limit is refused before a length is converted (the conversion is the slow part),
    and the expected-time note, parse included, comes before the parse."""
    from checkers import packing_checker as pc

    f = tmp_path / "l.txt"
    f.write_text("1 x 3\n4 5 6 7\n8 9 10 11\n")  # 11 lengths; line 1 is not even integers
    monkeypatch.setattr(pc, "MAX_LENGTHS", 10)
    with pytest.raises(pc.InputError, match="more than 10 lengths"):
        pc.read_refills(f)
    monkeypatch.setattr(pc, "MAX_LENGTHS", 11)
    heard = []
    with pytest.raises(pc.InputError, match="line 1: lengths must be integers"):
        pc.read_refills(f, heard.append)
    assert heard == [11]
    f.write_text("3 4\n")
    (tmp_path / "e.csv").write_text(
        "source_id,span_start,emitted,discarded,kind,lead_bos,source_len,row,row_offset,target_offset\n"
        "0,0,3,0,fit,0,3,0,0,0\n")
    monkeypatch.setattr(pc, "PARSE_S", 2.0)  # 2 lengths at 2 s each, one event and B = 1: about 4 s
    assert pc.compare(tmp_path / "e.csv", f, "original", 3, 1) == 0
    assert "note: 2 lengths, 1 events at B=1: expect about 4 s" in capsys.readouterr().err
