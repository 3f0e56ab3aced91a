"""Faults on the data side: each test is one class of the reliability issue, on real files.

A small real corpus is prepared once; tests that damage files work on a copy of it.
"""
import fcntl
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import prepare
from audit.__main__ import main as audit_main
from conftest import ROOT
from errors import DataError
from corpus.layout import Layout
import corpus.runlock
from corpus.runlock import FolderLocked, folder_lock, lock_file

ARGS = ["--max-files", "30", "--shards", "3", "--row-group-size", "40", "--vocab-size", "300"]
CHECKER = [sys.executable, "-I", "-S", str(ROOT / "checkers" / "packing_checker.py")]
HIST = [sys.executable, "-I", "-S", str(ROOT / "checkers" / "check_length_histogram.py")]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults") / "data"
    assert prepare.main(["--data-dir", str(d), *ARGS]) == 0
    return d


@pytest.fixture
def data(base, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(base, d)
    return d


@pytest.fixture(scope="module")
def audit_dir(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("faults_audit") / "audit"
    assert audit_main(["--data-dir", str(base), "--targets", str(60 * 128), "--row-capacity", "129", "--buffer", "10",
                       "--permutations", "0", "--packers", "original,segment_first", "--csv", "--no-figures", "--out",
                       str(out)]) == 0
    return out


def _one_line_error(capsys):
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]  # progress bars aside
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _flip(path, at=-1):
    b = bytearray(path.read_bytes())
    b[at] ^= 0xFF
    path.write_bytes(bytes(b))


def test_interrupted_rebuild_with_other_arguments_never_mixes_shards(data, monkeypatch):
    """Issue class 2: a kill during a rebuild under other arguments, then a rerun of the first build."""
    import corpus.stdlib_corpus as sc

    first = Layout(data, "stdlib").prepared()
    real, calls = sc.write_parquet_shard, []

    def dies_after_one(path, rows, rgs):
        if calls:
            raise KeyboardInterrupt  # the kill, after one shard of the new build is on disk
        calls.append(path)
        real(path, rows, rgs)

    monkeypatch.setattr(sc, "write_parquet_shard", dies_after_one)
    assert prepare.main(["--data-dir", str(data), *ARGS, "--seed", "7"]) == 130  # Ctrl-C: one line, status 130
    assert not (data / "stdlib" / "prepared.json").exists()  # no completion record survives a started rebuild
    monkeypatch.setattr(sc, "write_parquet_shard", real)
    assert prepare.main(["--data-dir", str(data), *ARGS]) == 0
    rec = Layout(data, "stdlib").prepared()
    assert rec["shards_sha256"] == first["shards_sha256"] and rec["arguments"]["seed"] == 20261008
    assert rec["val_rows_in_train"] == [] and rec["build_id"] == first["build_id"]


def test_corrupt_tokenizer_is_refused_then_retrained(data, capsys):
    """Issue class 3: a damaged tokenizer.json / token_bytes.npy is never trusted."""
    from corpus.tokenizer import load_encoding, load_token_bytes, token_bytes_table

    lay = Layout(data, "stdlib")
    good = (lay.tokenizer / "tokenizer.json").read_bytes()
    _flip(lay.tokenizer / "tokenizer.json", at=len(good) // 2)
    with pytest.raises(DataError, match="tokenizer.json: SHA256"):
        load_encoding(lay.tokenizer)
    assert prepare.main(["--data-dir", str(data), *ARGS]) == 0
    assert "retraining the tokenizer" in capsys.readouterr().out
    assert (lay.tokenizer / "tokenizer.json").read_bytes() == good  # deterministic retraining
    tb = lay.tokenizer / "token_bytes.npy"
    _flip(tb)
    with pytest.raises(DataError, match="token_bytes.npy: SHA256"):
        load_token_bytes(lay.tokenizer)
    assert prepare.main(["--data-dir", str(data), *ARGS]) == 0
    assert np.array_equal(load_token_bytes(lay.tokenizer), token_bytes_table(load_encoding(lay.tokenizer)))


def test_altered_token_files_are_refused_downstream(data, monkeypatch):
    """Issue class 4: token, offsets and refill files verified on open, and in full for the protocol."""
    from corpus.verify import verify_prepared
    from loaders.stream import open_split

    lay = Layout(data, "stdlib")
    val = lay.tokens / f"{lay.shard_names('val')[0]}.tokens.bin"
    _flip(val, at=100)
    with pytest.raises(DataError, match=r"tokens\.bin: SHA256"):
        open_split(data, "stdlib", "val")
    with pytest.raises(DataError, match=r"tokens\.bin: SHA256"):
        verify_prepared(lay.root, full=True)  # what freeze and the protocol check run
    _flip(val, at=100)  # restored: verifies again
    open_split(data, "stdlib", "val")
    tr = lay.tokens / f"{lay.shard_names('train')[0]}.tokens.bin"
    tr.write_bytes(tr.read_bytes()[:-10])
    with pytest.raises(DataError, match="bytes, prepared.json records"):
        open_split(data, "stdlib", "train")
    # with hashing knowingly skipped, a same-size edit that breaks the offsets is still caught
    off = lay.tokens / f"{lay.shard_names('val')[0]}.offsets.npy"
    a = np.load(off)
    a[3], a[4] = a[4], a[3]
    np.save(off, a)
    monkeypatch.setenv("PACKAUDIT_SKIP_HASH", "1")
    with pytest.raises(DataError, match="offsets are not strictly increasing"):
        open_split(data, "stdlib", "val")


def test_locks_refuse_a_second_writer(data, tmp_path, capsys):
    """Issue class 5: prepare's data root and the audit's output folder take an exclusive lock."""
    with folder_lock(data / "stdlib", "test"):
        assert prepare.main(["--data-dir", str(data), *ARGS]) == 2
        assert "in use by another process (pid" in _one_line_error(capsys)
    out = tmp_path / "audit"
    with lock_file(tmp_path / ".audit.lock", "test"):
        assert audit_main(["--data-dir", str(data), "--targets", str(20 * 128), "--row-capacity", "129",
                           "--out", str(out)]) == 2
        assert "in use by another process (pid" in _one_line_error(capsys)
    assert not out.exists() and not (tmp_path / ".audit.lock").exists()  # the holder removed its lock file


def test_a_lock_taken_on_a_file_its_holder_just_removed_is_taken_again_on_the_path(tmp_path, monkeypatch):
    # the race that removing lock files opens: we open the path, its holder removes the file and leaves, a third
    # process makes a new file there and locks it, then our flock succeeds on the removed file. The lock must
    # notice that the path names another file, and meet the third process's lock on it.
    path, real_open, third = tmp_path / ".out.lock", os.open, []

    def open_then_lose_the_race(p, flags, mode=0o777):
        fd = real_open(p, flags, mode)
        if not third:
            os.unlink(p)
            third.append(real_open(p, os.O_RDWR | os.O_CREAT, 0o644))
            fcntl.flock(third[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    monkeypatch.setattr(corpus.runlock.os, "open", open_then_lose_the_race)
    with pytest.raises(FolderLocked):
        with lock_file(path, "test"):
            pass
    os.close(third[0])
    with lock_file(path, "test"):
        assert path.exists()
    assert not path.exists()


def test_packing_checker_refuses_tampered_short_or_empty_exports(audit_dir, tmp_path):
    """Issue class 7: every column compared, coverage of the declared rows required, empty refused."""
    ev, lengths, summ = audit_dir / "events_original.csv", audit_dir / "stream_lengths.txt", audit_dir / "summary.json"
    base = ["--lengths", str(lengths), "--row-capacity", "129", "--buffer", "10", "--summary", str(summ)]
    ok = subprocess.run(CHECKER + ["--events", str(ev), *base], capture_output=True, text=True)
    assert ok.returncode == 0 and "all 10 columns" in ok.stdout
    lines = ev.read_text().splitlines(keepends=True)
    header = lines[0].strip().split(",")
    for col in ("source_len", "row", "row_offset", "target_offset"):
        k = header.index(col)
        cells = lines[5].rstrip("\n").split(",")
        cells[k] = str(int(cells[k]) + 1)
        bad = tmp_path / f"{col}.csv"
        bad.write_text("".join(lines[:5]) + ",".join(cells) + "\n" + "".join(lines[6:]))
        r = subprocess.run(CHECKER + ["--events", str(bad), *base], capture_output=True, text=True)
        assert r.returncode == 1 and f"column {col}" in r.stdout, (col, r.stdout, r.stderr)
    # the last row's events removed: whole rows remain, but not the declared ones
    rows = [ln.split(",") for ln in lines[1:]]
    last_row = rows[-1][header.index("row")]
    short = tmp_path / "short.csv"
    short.write_text(lines[0] + "".join(ln for ln, r in zip(lines[1:], rows) if r[header.index("row")] != last_row))
    r = subprocess.run(CHECKER + ["--events", str(short), *base], capture_output=True, text=True)
    assert r.returncode == 1 and "were declared" in r.stdout, r.stdout
    empty = tmp_path / "empty.csv"
    empty.write_text(lines[0])
    r = subprocess.run(CHECKER + ["--events", str(empty), *base], capture_output=True, text=True)
    assert r.returncode == 2 and "no events" in r.stderr


def test_packing_checker_zero_length_sources_refused_not_hung(audit_dir, tmp_path):
    """Issue class 12: a zero length would loop forever; it is refused before replaying."""
    z = tmp_path / "zero.txt"
    z.write_text("3 5\n0 6\n")
    r = subprocess.run(CHECKER + ["--events", str(audit_dir / "events_original.csv"), "--lengths", str(z),
                                  "--row-capacity", "129", "--buffer", "10"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "line 2: length 0 < 1" in r.stderr


def test_bad_inputs_give_one_line_never_a_traceback(data, audit_dir, tmp_path, capsys):
    """Issue class 13 (data side): prepare, audit, the histogram checker and the packing checker."""
    afile = tmp_path / "a_file"
    afile.write_text("x")
    for args, what in (([f"--data-dir={afile / 'sub'}"], "is a file"), (["--shards", "1"], "--shards 1"),
                       (["--vocab-size", "100"], "--vocab-size 100"), (["--max-files", "-1"], "--max-files -1")):
        fresh = tmp_path / "fresh"
        assert prepare.main([f"--data-dir={fresh}", *args]) == 2, args
        assert what in _one_line_error(capsys)
        assert not fresh.exists()  # checked before any work
    # audit: every bad argument refused before anything is written
    out = tmp_path / "audit_out"
    common = ["--data-dir", str(data), "--out", str(out)]
    for bad, what in ((["--row-capacity", "1"], "--row-capacity 1"), (["--buffer", "0"], "--buffer 0"),
                      (["--targets", "0"], "--targets 0"), (["--thresholds", "abc"], "--thresholds 'abc'"),
                      (["--permutations", "-3"], "--permutations -3")):
        assert audit_main(common + bad) == 2, bad
        assert what in _one_line_error(capsys)
        assert not out.exists()
    # a failing audit leaves the previous output exactly as it was
    good = tmp_path / "good"
    shutil.copytree(audit_dir, good)
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    import audit.plots as plots

    real = plots.length_histogram
    plots.length_histogram = lambda *a, **k: (_ for _ in ()).throw(DataError("disk full (simulated)"))
    try:
        rc = audit_main(["--data-dir", str(data), "--targets", str(30 * 128), "--row-capacity", "129", "--buffer", "5",
                         "--permutations", "0", "--packers", "original", "--out", str(good)])
    finally:
        plots.length_histogram = real
    assert rc == 2 and "disk full" in _one_line_error(capsys)
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
    assert not list(tmp_path.glob(".good.new-*"))
    # the histogram checker
    h = tmp_path / "h.csv"
    h.write_text("length,count\n")
    hist = data / "stdlib" / "census" / "train_length_histogram.csv"
    for argv, what in (([str(h)], "no data rows"), ([str(hist), "--buffer", "-5"], "--buffer -5")):
        r = subprocess.run(HIST + argv, capture_output=True, text=True)
        assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, r.stderr
    # the packing checker
    ev, ln = audit_dir / "events_original.csv", audit_dir / "stream_lengths.txt"
    text = ev.read_text()
    torn, nonint, empty_len = tmp_path / "torn.csv", tmp_path / "nonint.csv", tmp_path / "empty.txt"
    torn.write_text(text[: len(text) - 7])
    lines = text.splitlines(keepends=True)
    nonint.write_text(lines[0] + lines[1].replace(",", ",x", 1) + "".join(lines[2:]))
    empty_len.write_text("")
    for argv, what in ((["--events", str(torn), "--lengths", str(ln)], "torn"),
                       (["--events", str(nonint), "--lengths", str(ln)], "line 2"),
                       (["--events", str(ev), "--lengths", str(tmp_path / "missing.txt")], "cannot read"),
                       (["--events", str(ev), "--lengths", str(empty_len)], "no lengths"),
                       (["--events", str(ev), "--lengths", str(ln), "--buffer", "0"], "--buffer 0")):
        r = subprocess.run(CHECKER + argv + ["--row-capacity", "129"], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, (argv, r.stderr)


def test_prepare_removes_its_stale_temporaries(data, capsys):
    """Issue class 14: temporaries a killed prepare left behind are removed on the next run."""
    root = data / "stdlib"
    stale = [root / "census" / ".train_length_histogram.csv.k2j3.tmp", root / "raw" / ".shard_00000.parquet.part"]
    for p in stale:
        p.write_bytes(b"half")
    assert prepare.main(["--data-dir", str(data), *ARGS]) == 0
    assert "removed 2 stale temporary" in capsys.readouterr().out
    assert not any(p.exists() for p in stale)
