"""Bad input is one line and exit status 2 (issue 20, "Bad input"): model shapes the model
cannot build, a boolean where a number belongs, a read-only output folder; and key=value
overrides are accepted wherever they stand among train.py's options. The audit's bad inputs
(issue 50): each one line, nothing written, no lock left; Ctrl-C one line."""
import json
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, one_line_error

import audit.run as audit_run
import train as train_cli
from audit.__main__ import main as audit_main
from audit.api import trace
from errors import DataError
from eval.official import main as official_main
from manifests.__main__ import main as manifest_main
from train import train
from training.config import resolve_config

TINY = ["depth=1", "context=32", "short_window=16", "vocab=400"]



@pytest.mark.parametrize("shape,needle", [
    (["width=2", "heads=1", "kv_heads=1"], "'width'"),  # narrower than the value-embedding gate's 32 channels
    (["width=6", "heads=1", "kv_heads=1"], "'width'"),
    (["width=66", "heads=2", "kv_heads=2"], "head dimension"),  # 33: rotary embeddings need an even one
])
def test_model_shapes_the_model_cannot_run_are_refused_at_resolution(capsys, shape, needle):
    rc = train_cli.main(TINY + shape + ["--dry-run"])
    one_line_error(capsys, rc, needle)


def test_a_boolean_is_not_a_number(tmp_path, capsys):
    for key, value in (("muon_lr", True), ("updates", False), ("weight_decay", False)):
        cfg = tmp_path / f"{key}.json"
        cfg.write_text(json.dumps({key: value}))
        rc = train_cli.main(["--config", str(cfg), "--dry-run"])
        one_line_error(capsys, rc, f"'{key}'", "boolean")


def test_overrides_are_accepted_after_the_options(capsys):
    rc = train_cli.main(TINY + ["--out", "/nonexistent/x", "width=64", "--dry-run", "updates=7"])
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert '"width": 64' in printed and '"updates": 7' in printed


def test_unwritable_outputs_and_a_full_disk_are_one_line_naming_the_path(small_corpus, tmp_path, capsys,
                                                                          monkeypatch):
    import errno

    import corpus.atomic

    tiny = TINY + ["width=32", "heads=2", "kv_heads=2", "micro_rows=2", "accum=1", "updates=1", "eval_batches=1",
                   "eval_rows=2", "buffer=40", "prefetch=0", f"data_dir={small_corpus}"]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc = train_cli.main(tiny + ["--out", str(blocker / "run")])  # a folder cannot be made inside a file
    one_line_error(capsys, rc, str(blocker / "run"), "needs")
    run = tmp_path / "run"
    train(resolve_config(None, tiny), run, log=lambda m: None)

    def full(fd):  # what a full disk answers when the written data is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus.atomic.os, "fsync", full)
    rc = official_main([str(run / "ckpt_000001.pt"), "--device", "cpu", "--out", str(tmp_path / "rows.parquet")])
    one_line_error(capsys, rc, "rows.parquet", "free disk space")
    rc = manifest_main(["write", str(run), "--out", str(tmp_path / "m.sha256")])
    one_line_error(capsys, rc, "m.sha256", "free disk space")
    rc = train_cli.main(tiny + ["--out", str(tmp_path / "run2")])
    one_line_error(capsys, rc, "run2", "free disk space")
    import prepare

    rc = prepare.main(["--data-dir", str(tmp_path / "data"), "--max-files", "30", "--shards", "3"])
    one_line_error(capsys, rc, str(tmp_path / "data"), "free disk space")
    assert not list(tmp_path.glob("*.tmp")) and not list((tmp_path / "run2").glob(".*.tmp"))


def _audit_inputs(tmp_path):
    """The files the audit's bad-input cases read: a length file, a parquet of lengths with no named length column."""
    (tmp_path / "ok.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    (tmp_path / "huge.txt").write_text("5\n40\n1000000000000\n7\n")
    pq.write_table(pa.table({"doc_id": [1, 2, 3], "tokens": [5, 9, 4]}), tmp_path / "l.parquet")
    (tmp_path / "folder").mkdir()
    (tmp_path / "mine").mkdir()  # a researcher's folder: their lengths and notes
    (tmp_path / "mine" / "L.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    (tmp_path / "mine" / "notes.txt").write_text("keep me\n")
    return ["--row-capacity", "33", "--buffer", "4", "--packers", "original", "--permutations", "0", "--no-figures"]


@pytest.mark.parametrize("case, args, needles", [
    # the third entry, counted from 1 as the --lengths reader counts (it said "row 2", the index's count from 0)
    ("a length of 10^12", ["--lengths", "huge.txt"],
     ["--lengths huge.txt: entry 3", "1,000,000,000,000 tokens", "--max-length"]),
    ("--label-column with a text file", ["--lengths", "ok.txt", "--label-column", "source"],
     ["--label-column 'source'", "applies to a .parquet"]),
    ("a parquet without --column", ["--lengths", "l.parquet"], ["--column", "doc_id, tokens"]),
    ("a folder", ["--lengths", "folder"], ["is a folder"]),
    ("an --out where nothing can be made", ["--lengths", "ok.txt", "--out", "/proc/x/audit"], ["--out /proc/x/audit"]),
    ("--passes 0", ["--lengths", "ok.txt", "--passes", "0"], ["--passes 0"]),
    # the audit swaps a new folder in for --out: a folder of other files, the working folder or one holding the
    # input would be deleted with it
    ("an --out of other files", ["--lengths", "ok.txt", "--out", "mine"],
     ["--out mine: holds files that are not an earlier audit's output (L.txt, notes.txt)", "new or empty folder"]),
    ("the working folder as --out", ["--lengths", "ok.txt", "--out", "."], ["--out .: is the working folder"]),
    ("an --out above the working folder", ["--lengths", "ok.txt", "--out", ".."], ["--out ..: is the working folder or holds it"]),
    ("an --out holding the input", ["--lengths", "mine/L.txt", "--out", "mine"], ["--out mine: holds the input mine/L.txt"]),
    # every file in a --corpus folder is read: a rerun would have read the first run's output as corpus
    ("an --out inside a --corpus folder", ["--corpus", "mine", "--out", "mine/audit"],
     ["--out mine/audit: is inside the input folder mine", "give a folder outside it"]),
    ("an --out under a --corpus recursive glob", ["--corpus", "mine/**/*.parquet", "--out", "mine/a/audit"],
     ["--out mine/a/audit: is inside the input folder mine,", "give a folder outside it"]),
    # the same for the lengths cache (a new user's probe: accepted once, then every rerun read it as corpus)
    ("a --cache-dir inside a --corpus folder", ["--corpus", "mine", "--cache-dir", "mine/cache", "--out", "o"],
     ["--cache-dir mine/cache: is inside the input folder mine", "give a folder outside it"]),
])
def test_the_audits_bad_inputs_are_one_line_writing_nothing_and_leaving_no_lock(tmp_path, capsys, monkeypatch,
                                                                                 case, args, needles):
    common = _audit_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = [] if "--out" in args else ["--out", "out"]
    one_line_error(capsys, audit_main(args + common + out), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, case  # no output, no .new- folder, no lock


def test_ctrl_c_while_the_audit_still_imports_is_its_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    """A new user's Ctrl-C in the first half second printed a 30-line KeyboardInterrupt traceback from the plan's
    imports, which ran before the command's own handling. Here the interrupt arrives as audit.plan is imported."""
    class CtrlC:  # asked first by the import system: the interrupt lands inside the import
        def find_spec(self, name, path=None, target=None):
            if name == "audit.plan":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "audit.plan", raising=False)
    monkeypatch.setattr(sys, "meta_path", [CtrlC(), *sys.meta_path])
    out = tmp_path / "o"
    assert audit_main(["--lengths", str(tmp_path / "L.txt"), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert f"interrupted: nothing written; {out} is as it was" in err and "Traceback" not in err
    assert not out.exists()


def test_an_empty_folder_or_an_earlier_audits_output_is_replaced_and_a_refused_folder_keeps_its_files(tmp_path):
    common = _audit_inputs(tmp_path)
    lengths = ["--lengths", str(tmp_path / "ok.txt")]
    assert audit_main(lengths + common + ["--out", str(tmp_path / "folder")]) == 0  # empty: used
    (tmp_path / "folder" / "mine.txt").write_text("x")  # an earlier audit's output, with a file added: replaced whole
    assert audit_main(lengths + common + ["--out", str(tmp_path / "folder")]) == 0
    assert (tmp_path / "folder" / "summary.json").exists() and not (tmp_path / "folder" / "mine.txt").exists()
    assert audit_main(lengths + common + ["--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me\n"
    # an audit's output from before its summary carried a schema: replaced
    shutil.copytree(ROOT / "tests" / "reference" / "audit" / "topology", tmp_path / "old")
    for name in ("summary.json", "comparison.json"):
        record = json.loads((tmp_path / "old" / name).read_text())
        del record["schema"]
        (tmp_path / "old" / name).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    assert audit_main(lengths + common + ["--out", str(tmp_path / "old")]) == 0


def test_a_buffer_larger_than_a_pass_says_what_it_holds_and_one_the_memory_cannot_hold_is_refused(tmp_path, capsys,
                                                                                                    monkeypatch):
    # ok.txt: 20 documents a pass; 310 bytes a buffer place and 320 an arrival. --buffer 50: 50 arrivals from 3
    # passes, 50 x 630 = 31,500 bytes = 30.8 KB (of 1,024)
    common = _audit_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert audit_main(["--lengths", "ok.txt", *common, "--buffer", "50", "--out", "out"]) == 0
    assert ("note: --buffer 50 holds more documents than a pass of the stream (20): the paper's packers take in up to "
            "50 arrivals, from 3 passes, before their first row; about 30.8 KB of memory\n") in capsys.readouterr().out
    # two ranks, groups of 3 dealt round-robin: worker streams of 11 and 9 documents, each filling its own buffer
    assert audit_main(["--lengths", "ok.txt", *common, "--buffer", "50", "--ranks", "2", "--split-by", "group:3",
                       "--out", "out"]) == 0
    assert ("note: --buffer 50 holds more documents than a pass of the smallest of the 2 worker streams (9): the "
            "paper's packers take in up to 50 arrivals, from 6 passes,") in capsys.readouterr().out
    # one pass: 20 arrivals never fill 50 places; 50 x 310 + 20 x 320 = 21,900 bytes = 21.4 KB
    audit_main(["--lengths", "ok.txt", *common, "--buffer", "50", "--passes", "1", "--out", "out"])
    assert ("note: --buffer 50 holds more documents than the stream gives in its 1 pass (--passes): 20; the paper's "
            "packers never fill it and make no row; about 21.4 KB of memory\n") in capsys.readouterr().out
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setattr(audit_run, "physical_memory", lambda: 10 ** 6)  # 976.6 KB
    # 2,000 x 630 bytes = 1.2 MB; refused before the folder above --out is made
    one_line_error(capsys, audit_main(["--lengths", "ok.txt", *common, "--buffer", "2000", "--out", "new/out"]),
                   "--buffer 2,000 needs about 1.2 MB of memory, more than this machine's 976.6 KB; give a smaller "
                   "--buffer")
    # two permutations on 8 local workers: 2 replays at once, not 8; 2 x 1,000 x 630 bytes = 1.2 MB
    one_line_error(capsys, audit_main(["--lengths", "ok.txt", *common, "--buffer", "1000", "--permutations", "2",
                                       "--workers", "8", "--out", "new/out"]),
                   "--buffer 1,000 needs about 1.2 MB of memory (2 replays at once), more than this machine's 976.6 KB")
    # one pass: 20 arrivals, but the 2,000 places still take theirs: 2,000 x 310 + 20 x 320 = 626,400 bytes
    monkeypatch.setattr(audit_run, "physical_memory", lambda: 5 * 10 ** 5)
    one_line_error(capsys, audit_main(["--lengths", "ok.txt", *common, "--buffer", "2000", "--passes", "1", "--out",
                                       "new/out"]), "--buffer 2,000 needs about 611.7 KB of memory")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


SHORT_OF_A_ROW = ("error: budget of 0 targets is less than one row of 32: the paper's share (79.15%) of this length "
                  "file's 3 tokens; give ")


@pytest.mark.parametrize("extra, fixes", [
    (["--no-figures"], "--targets 32 (the stream wraps to reach it), a --row-capacity of 3 or less, or a corpus with "
                       "more tokens"),
    (["--no-figures", "--passes", "1"], "a --row-capacity of 3 or less or a corpus with more tokens"),
    (["--sweep", "buffer=1,2"], "--targets 32 (the stream wraps to reach it), a --row-capacity of 3 or less, or a "
                                "corpus with more tokens"),
], ids=["wraps", "one-pass", "sweep"])
def test_a_stream_whose_scaled_budget_is_short_of_one_row_says_what_to_give(tmp_path, capsys, monkeypatch, extra,
                                                                             fixes):
    (tmp_path / "L.txt").write_text("1\n1\n1\n")  # 3 tokens: 79.15% of them is 2 targets, a row of R=3 at most
    monkeypatch.chdir(tmp_path)
    rc = audit_main(["--lengths", "L.txt", "--row-capacity", "33", "--permutations", "0", "--out", "out", *extra])
    one_line_error(capsys, rc, SHORT_OF_A_ROW + fixes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L.txt"]

def test_a_buffer_no_memory_holds_is_one_line_and_nothing_written(tmp_path, capsys, monkeypatch):
    # 10^15 documents, on a machine that does not say its memory: the buffer's bookkeeping asks for more than any
    # address space (no page is touched)
    common = _audit_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(audit_run, "physical_memory", lambda: None)
    before = sorted(p.name for p in tmp_path.iterdir())
    one_line_error(capsys, audit_main(["--lengths", "ok.txt", *common, "--buffer", str(10 ** 15), "--out", "out"]),
                   "out of memory (--buffer 1,000,000,000,000,000", "nothing written, out is as it was")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_audit_whose_every_packer_refused_fails_and_lists_only_what_it_wrote(tmp_path, capsys):
    # a blend needs two datasets; a plain length file is one: the report says why, the status is no success
    common = _audit_inputs(tmp_path)
    rc = audit_main(["--lengths", str(tmp_path / "ok.txt"), *common, "--packers", "megatron_blend", "--out",
                     str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert rc == 1
    assert err.strip().splitlines()[-1].startswith("error: every packer refused this stream (megatron_blend:")
    wrote = [ln for ln in out.splitlines() if ln.startswith("wrote ")]
    assert wrote and "events" not in wrote[0] and not list((tmp_path / "out").glob("events_*"))


def test_labels_of_the_wrong_length_are_one_line_not_a_refused_packer():
    with pytest.raises(DataError, match="2 labels for 3 documents"):
        trace(lambda docs: (list(d) for d in docs), [3, 4, 5], row_capacity=8, labels=["a", "b"])


def test_ctrl_c_during_the_audit_is_one_line_and_leaves_no_output(tmp_path, capsys, monkeypatch):
    common = _audit_inputs(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())

    def interrupted(*a, **k):  # Ctrl-C as the folder is being written
        raise KeyboardInterrupt

    monkeypatch.setattr(audit_run, "write_folder", interrupted)
    rc = audit_main(["--lengths", str(tmp_path / "ok.txt"), *common, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("packers:")]  # the progress bar aside
    assert rc == 130 and lines == [f"interrupted: nothing written; {tmp_path / 'out'} is as it was"], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_error_of_the_audits_own_code_is_not_passed_off_as_bad_input(tmp_path, monkeypatch):
    """A ValueError from inside the audit (a bug: the length histogram's unpacking once) propagates with its
    traceback instead of becoming an `error:` line that blames the input; the temporary folder and the lock still go."""
    common = _audit_inputs(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())

    def broken(*a, **k):
        raise ValueError("not enough values to unpack (expected 2, got 0)")

    monkeypatch.setattr(audit_run, "write_folder", broken)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        audit_main(["--lengths", str(tmp_path / "ok.txt"), *common, "--out", str(tmp_path / "out")])
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_finished_audit_leaves_no_lock_beside_its_folder(tmp_path):
    common = _audit_inputs(tmp_path)
    assert audit_main(["--lengths", str(tmp_path / "ok.txt"), *common, "--out", str(tmp_path / "out")]) == 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_audit_clears_and_names_what_an_audit_killed_before_it_left(tmp_path, capsys):
    """A kill -9 (or Ray ending the driver) leaves the lock file and the unfinished folder: the next audit takes the
    lock, removes the folder and says so; an audit with nothing to clear says nothing of it."""
    common = _audit_inputs(tmp_path)
    (tmp_path / ".out.new-k1ll3d").mkdir()
    (tmp_path / ".out.new-k1ll3d" / "events_original.parquet").write_bytes(b"partial")
    (tmp_path / ".out.lock").write_text("pid 999999999: python -m audit ... (a process that is gone)\n")
    argv = ["--lengths", str(tmp_path / "ok.txt"), *common, "--out", str(tmp_path / "out")]
    assert audit_main(argv) == 0
    assert f"note: removed .out.new-k1ll3d beside {tmp_path / 'out'}: the unfinished output of an earlier audit" in \
        capsys.readouterr().out
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert audit_main(argv) == 0 and "note: removed" not in capsys.readouterr().out


def test_a_file_where_a_folder_must_be_is_named_as_such():
    import errno

    from errors import os_error_line

    assert os_error_line(OSError(errno.EEXIST, "File exists", "/x/q")) == "/x/q: File exists; needs a folder there, not a file"
    assert os_error_line(OSError(errno.ENOTDIR, "Not a directory", "/f/q")).endswith("needs a folder there, not a file")
    assert os_error_line(OSError(errno.EIO, "Input/output error", "/d")).endswith("needs a working file system")
    # a connection's error is an OSError too, with no file: said as what it is
    assert os_error_line(ConnectionError("Client is shutting down.")) == (
        "a connection failed (ConnectionError: Client is shutting down.); check that what it connects to is up and "
        "reachable")
    # a closed output is a ConnectionError too: said as a closed pipe, not as a connection to check (a new user's
    # probe piped a queue run into `head`)
    assert os_error_line(BrokenPipeError(errno.EPIPE, "Broken pipe")) == (
        "a pipe it wrote to was closed (BrokenPipeError): its reader ended, as `| head` does to the output, or a "
        "process it fed stopped; it stopped here (send the output to a file, or read it with `less`)")
    assert os_error_line(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")) == (
        "a connection failed (ConnectionResetError: Connection reset by peer); check that what it connects to is up "
        "and reachable")
