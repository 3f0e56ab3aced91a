"""The audit on a researcher's own data: a length file in arrival order (text, .npy, .parquet),
R, B and the packers on the command line, cross-checked by the standard-library checker."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import lengths_file
from audit.__main__ import main as audit_main
from errors import DataError

ROOT = Path(__file__).resolve().parents[1]
R, B = 33, 6


def _lengths():
    # short documents with a few long ones (> R) mixed in, fixed so the test is reproducible
    rng = np.random.default_rng(7)
    L = rng.integers(1, 24, size=400)
    L[::17] = rng.integers(R + 1, 6 * R, size=len(L[::17]))
    return L


def _args(path, out, *extra):
    return ["--lengths", str(path), "--row-capacity", str(R), "--buffer", str(B), "--targets", str(150 * (R - 1)),
            "--refill-docs", "16", "--permutations", "3", "--csv", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    L = _lengths()
    (d / "lengths.txt").write_text("# my corpus, one document per line\n" + "\n".join(map(str, L)) + "\n")
    assert audit_main(_args(d / "lengths.txt", d / "out", "--packers", "original,lossless")) == 0
    return d, L


PLAIN_ENDS = ["\n", "\r\n", "\r", "\n\n"]  # a plain file's line ends (and a blank line)
OTHER_ENDS = [" ", "\t", "\n# a comment\n", "\n \n", "x\n"]  # what _lines alone reads


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.integers(0, 10**6), st.integers(10**17, 2**64)), st.booleans(),
                          st.sampled_from(PLAIN_ENDS + PLAIN_ENDS + OTHER_ENDS)), max_size=30), st.booleans())
def test_a_plain_length_file_reads_as_the_line_by_line_reader_reads_it(tmp_path_factory, lines, lead):
    """The plain files' fast reader (numpy's parse) against _lines, on files it reads and files it hands over."""
    path = tmp_path_factory.getbasetemp() / "plain.txt"
    text = ("\n" if lead else "") + "".join(f"{'00' if zeros else ''}{n}{end}" for n, zeros, end in lines)
    path.write_text(text, newline="")

    def read(how):
        try:
            lengths, refills = how()
            return lengths.tolist(), None if refills is None else refills.tolist()
        except DataError as e:
            return str(e)

    assert read(lambda: lengths_file._text(path)) == read(lambda: lengths_file._lines(path.read_bytes(), path))
    if all(end in PLAIN_ENDS and n < 10**18 for n, _, end in lines):  # a plain file: the fast reader's
        assert lengths_file._plain(path.read_bytes()).tolist() == [n for n, _, _ in lines]


def test_own_lengths_audit_report_and_checker(own):
    d, L = own
    out = d / "out"
    s = json.loads((out / "summary.json").read_text())
    assert s["source"] == "lengths" and (s["row_capacity"], s["buffer"]) == (R, B)
    assert set(s["packers"]) == {"original", "lossless"}
    o = s["packers"]["original"]
    assert o["sources_longer_than_R_arrived"] > B and o["protected"]["proposition_held"] is True
    md = (out / "report.md").read_text()
    for heading in ("## 5.1 Coverage at the budget", "### Retention of loaded token mass", "### Startup delay",
                    "## 5.2 Repeated-corpus bounds", "## Regime", "## Figures"):
        assert heading in md
    assert {"startup_delay.png", "buffer_mass.png", "sources_started.png", "position_exposure.png"} <= set(s["figures"])
    for f in s["figures"]:
        assert (out / f).read_bytes()[:4] == b"\x89PNG"
    # the file's own order, cut into refills of 16: the checker replays it independently
    lines = (out / "stream_lengths.txt").read_text().split("\n")
    assert [int(x) for x in lines[0].split()] == L[:16].tolist()
    # R and B are the audit's own, not the checker's defaults (2049, 1000): the summary gives them, a flag may repeat
    # them, and one that contradicts the audit is refused rather than read as a mismatch of the events
    for packer, flags in (("original", []), ("lossless", ["--row-capacity", str(R), "--buffer", str(B)]),
                          ("original", ["--buffer", str(B + 1)])):
        r = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "checkers" / "packing_checker.py"),
                            "--events", str(out / f"events_{packer}.csv"), "--lengths", str(out / "stream_lengths.txt"),
                            "--packer", packer, *flags, "--summary", str(out / "summary.json")],
                           capture_output=True, text=True)
        if str(B + 1) in flags:
            assert r.returncode == 2 and r.stderr == (f"error: --buffer {B + 1}: the audit in {out / 'summary.json'} "
                                                      f"ran at {B}; give that, or leave --buffer out\n"), r.stderr
        else:
            assert r.returncode == 0 and r.stdout.startswith("match:") and f"R={R}, B={B})" in r.stdout, r.stdout


@pytest.mark.parametrize("form", ["npy", "parquet"])
def test_npy_and_parquet_columns_give_the_same_audit(own, form):
    d, L = own
    if form == "npy":
        path = d / "lengths.npy"
        np.save(path, L)
        extra = []
    else:
        path = d / "lengths.parquet"
        pq.write_table(pa.table({"doc_id": np.arange(len(L)), "tokens": L}), path)
        extra = ["--column", "tokens"]
    assert audit_main(_args(path, d / form, "--packers", "original,lossless", "--no-figures", *extra)) == 0
    a = json.loads((d / "out" / "summary.json").read_text())["packers"]
    b = json.loads((d / form / "summary.json").read_text())["packers"]
    assert a == b


@pytest.mark.parametrize("content, extra, msg", [
    ("5\nseven\n", [], "line 2"),
    ("5\n0\n", [], "at least 1"),
    ("", [], "no lengths"),
    ("5\n" + "9" * 5000 + "\n", [], "line 2: a length does not fit in 64 bits"),  # more digits than int() reads
    ("5\n" + "9" * 30 + "\n", [], "a length does not fit in 64 bits"),
    ("5\n", ["--column", "x"], "--column"),
])
def test_bad_length_file_is_one_line_and_status_2(tmp_path, capsys, content, extra, msg):
    f = tmp_path / "l.txt"
    f.write_text(content)
    assert audit_main(["--lengths", str(f), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("budget, msg", [
    (["--targets", str(150 * (R - 1) + 5)], f"--targets {150 * (R - 1) + 5}: not a whole number of rows of {R - 1} "
                                           f"targets (--row-capacity {R}); give --targets {150 * (R - 1)} or"),
    (["--updates", "1", "--row-capacity", "512"], "--updates 1 (524,288 targets): not a whole number of rows of 511 "
                                                  "targets (--row-capacity 512); give --targets 524286 or 524797"),
    # under one row: one row, said once (a new user's probe read "give --targets 2048 or 2048")
    (["--targets", "100", "--row-capacity", "65"], "--targets 100: not a whole number of rows of 64 targets "
                                                   "(--row-capacity 65); give --targets 64 or 128"),
    (["--targets", "40", "--row-capacity", "65"], "(--row-capacity 65); give --targets 64\n"),
], ids=["targets", "updates", "over one row", "under one row"])
def test_a_budget_of_no_whole_number_of_rows_is_one_line_and_keeps_the_earlier_output(own, capsys, budget, msg):
    # a helper's rerun: --targets 200000 at R 512 ended in rows_for_targets's ValueError with its traceback
    d, _ = own
    before = {p.name: p.read_bytes() for p in (d / "out").iterdir()}
    argv = _args(d / "lengths.txt", d / "out", "--packers", "original,lossless")
    i = argv.index("--targets")
    rc = audit_main(argv[:i] + argv[i + 2:] + budget)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.strip().count("\n") == 0 and msg in err, err
    assert {p.name: p.read_bytes() for p in (d / "out").iterdir()} == before
    assert not list(d.glob(".out.*"))


def test_an_out_folder_that_cannot_be_made_is_named_in_one_line(tmp_path, capsys):
    f = tmp_path / "l.txt"
    f.write_text("5\n7\n")
    (tmp_path / "a_file").write_text("")
    assert audit_main(["--lengths", str(f), "--out", str(tmp_path / "a_file" / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --out {tmp_path / 'a_file' / 'x'}: cannot be made: {tmp_path / 'a_file'} is not a folder"


def test_a_trace_target_that_is_not_callable_is_refused_before_the_audit(tmp_path, capsys):
    f = tmp_path / "l.txt"
    f.write_text("5\n7\n")
    assert audit_main(["--lengths", str(f), "--trace", "os:path", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "os.path is a module, not a callable" in err and not (tmp_path / "o").exists()
