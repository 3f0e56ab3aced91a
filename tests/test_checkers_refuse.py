"""Checkers and verifiers refuse what they cannot check (issue 20): a histogram cut short,
packing-checker inputs that are not UTF-8 or would make it run without end or exhaust
memory, manifest entries that are not regular files or leave the manifest's folder. Each is
one line and a failing exit status, never PASS, never a hang. Hand-made tiny inputs."""
import os
import subprocess
import sys

from checkers.verify_confirmation import main as confirmation_main
from checkers.verify_evaluation_summary import main as rankings_main
from checkers.verify_window_evidence import main as windows_main
from conftest import ROOT
from manifests.__main__ import main as manifest_main

HIST = [sys.executable, "-I", "-S", str(ROOT / "checkers" / "check_length_histogram.py")]
CHECKER = [sys.executable, "-I", "-S", str(ROOT / "checkers" / "packing_checker.py")]
# guards against a hang on a broken build only; a working checker answers at once
GUARD_S = 120


def run(cmd, *args):
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=GUARD_S)


def one_line(r, rc=2):
    assert r.returncode == rc and "Traceback" not in r.stderr and "PASS" not in r.stdout, r.stdout + r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error:")]) == 1, r.stderr


def test_a_histogram_cut_short_fails(tmp_path):
    # 3 lengths, 14 sources, 5*1 + 10*6 + 3000*7 = 21,065 tokens: what census.json records for "train"
    full = "length,count\n5,1\n10,6\n3000,7\n"
    (tmp_path / "census.json").write_text('{"train": {"documents": 14, "tokens": 21065}}')
    h = tmp_path / "train_length_histogram.csv"
    h.write_text(full)
    r = run(HIST, h)
    assert r.returncode == 0 and "PASS  census.json sources 14 == 14" in r.stdout, r.stdout + r.stderr
    h.write_text(full[:-4])  # cut mid-line: "3000,7" became "300"
    one_line(run(HIST, h))
    h.write_text(full[: full.index("3000")])  # cut at a line boundary: only the totals show it
    r = run(HIST, h)
    assert r.returncode == 1 and "FAIL  census.json sources 14 != 7" in r.stdout, r.stdout + r.stderr
    h.write_text("length,count\n10,6\n5,1\n")  # not as the census writes it
    one_line(run(HIST, h))


def test_packing_checker_refuses_non_utf8_runaway_and_oversized_inputs(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("3 5\n2 6\n")
    events = tmp_path / "events.csv"
    header = "source_id,span_start,emitted,discarded,kind,lead_bos,source_len,row,row_offset,target_offset\n"
    events.write_text(header + "0,0,3,0,fit,0,3,0,0,0\n2,0,1,1,crop,0,2,0,3,2\n")
    r = run(CHECKER, "--events", events, "--lengths", lengths, "--row-capacity", 4, "--buffer", 2)
    assert r.returncode == 0 and "match: 2 events, 1 rows" in r.stdout, r.stdout + r.stderr
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"3 5\n\xff\xfe 2\n")
    one_line(run(CHECKER, "--events", events, "--lengths", bad, "--row-capacity", 4, "--buffer", 2))
    bad_ev = tmp_path / "latin1.csv"
    bad_ev.write_bytes(header.encode() + b"0,0,3,0,fit,0,3,0,0,\xe9\n")
    one_line(run(CHECKER, "--events", bad_ev, "--lengths", lengths, "--row-capacity", 4, "--buffer", 2))
    # one event claiming 100,000,000 rows: the replay would run for hours
    huge = tmp_path / "huge.csv"
    huge.write_text(header + "0,0,204900000000,0,fit,0,3,0,0,0\n")
    one_line(run(CHECKER, "--events", huge, "--lengths", lengths))
    # a buffer of 300 million spans would hold gigabytes
    one_line(run(CHECKER, "--events", events, "--lengths", lengths, "--row-capacity", 4, "--buffer", 300_000_000))
    # segment_first: one length of 10^12 at R=4 would be cut into 3.3e11 buffered segments
    long = tmp_path / "long.txt"
    long.write_text("3 1000000000000\n")
    one_line(run(CHECKER, "--events", events, "--lengths", long, "--row-capacity", 4, "--buffer", 2,
                 "--packer", "segment_first"))


def test_manifest_verify_hashes_only_regular_files_inside_its_folder(tmp_path, capsys):
    d = tmp_path / "m"
    d.mkdir()
    (d / "a.bin").write_bytes(b"a")
    assert manifest_main(["write", str(d / "a.bin"), "--out", str(d / "x.sha256")]) == 0
    good = (d / "x.sha256").read_text()
    zeros = "0" * 64
    os.mkfifo(d / "fifo")
    (d / "sub").mkdir()
    (tmp_path / "outside.txt").write_text("secret")
    for line, word in ((f"{zeros}  fifo\n", "NOTFILE"), (f"{zeros}  sub\n", "NOTFILE"),
                       (f"{zeros}  ../outside.txt\n", "OUTSIDE"), (f"{zeros}  sub/../../outside.txt\n", "OUTSIDE")):
        (d / "x.sha256").write_text(good + line)
        capsys.readouterr()
        assert manifest_main(["verify", str(d / "x.sha256")]) == 1, line
        assert word in capsys.readouterr().out
    (d / "x.sha256").write_text(good + "# covers: .. glob *\n")
    assert manifest_main(["verify", str(d / "x.sha256")]) == 1


def test_the_evidence_checkers_name_a_missing_folder_in_one_line(tmp_path, capsys):
    for main in (windows_main, rankings_main, confirmation_main):
        for args, needle in (([str(tmp_path / "none")], f"{tmp_path / 'none'}: no such folder"),
                             ([str(ROOT / "README.md")], "README.md: not a folder"), ([], "no arguments")):
            assert main(args) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and err.startswith("error: ") and needle in err, err
    # a folder without the eval's files (a run folder given for the eval folder): the file named, not "truncated"
    for main, name in ((confirmation_main, "confirmation.json"), (rankings_main, "rankings.json")):
        assert main([str(tmp_path)]) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {tmp_path / name}: no such file; ")


def test_manifest_verify_names_a_few_unparsable_lines_and_refuses_a_non_manifest_in_one(tmp_path, capsys):
    (tmp_path / "a.bin").write_bytes(b"a")
    assert manifest_main(["write", str(tmp_path / "a.bin"), "--out", str(tmp_path / "x.sha256")]) == 0
    good = (tmp_path / "x.sha256").read_text()
    (tmp_path / "x.sha256").write_text(good + "".join(f"junk {i}\n" for i in range(40)))
    capsys.readouterr()
    assert manifest_main(["verify", str(tmp_path / "x.sha256")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len([ln for ln in out if "not a '<sha256>  <path>' line" in ln]) == 5, out
    assert any("35 more unparsable line(s) not shown" in ln for ln in out) and len(out) == 7, out
    (tmp_path / "notes.md").write_text("".join(f"line {i}\n" for i in range(40)))
    assert manifest_main(["verify", str(tmp_path / "notes.md")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "not a manifest" in out[0], out


def test_packing_checker_refuses_segment_first_one_segment_over_its_cap_and_counts_them(tmp_path):
    lengths, events = tmp_path / "lengths.txt", tmp_path / "events.csv"
    events.write_text("source_id,span_start,emitted,discarded,kind,lead_bos,source_len,row,row_offset,target_offset\n"
                      "0,0,3,0,fit,0,3,0,0,0\n")
    # at R = 4: the 3 is one segment; 30,000,001 is a first segment of 4 tokens, then 29,999,997 tokens in
    # segments of R - 1 = 3 (each behind its BOS): 9,999,999 more; 1 + 1 + 9,999,999 = 10,000,001, one over 10^7
    lengths.write_text("3 30000001\n")
    r = run(CHECKER, "--events", events, "--lengths", lengths, "--row-capacity", 4, "--buffer", 2, "--rows", 1,
            "--packer", "segment_first")
    one_line(r)
    assert r.stderr.strip() == (f"error: {lengths}: 10,000,001 segments per pass at R=4, more than the checker holds "
                                "(10,000,000)"), r.stderr
