"""Evaluation under faults and bad inputs, on real tiny runs: partial sets, locks, manifests,
corrupt summaries and protocols, the pre-scoring stream checks, confirmed vs exploratory passes."""
import importlib
import json
import os
import shutil
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest

from corpus.layout import Layout
from corpus.runlock import folder_lock
from errors import DataError
from eval.__main__ import main as eval_main
from eval.confirmation import confirmation_fingerprint
from eval.plan import evaluation_plan
from eval.stream_checks import audit_stream, require
from loaders.stream import open_split
from manifests.__main__ import main as manifest_main
from protocols.protocol import write_protocol
from train import train
from training.checkpoint import code_sha256
from training.config import resolve_config

BASE = dict(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=2,
            accum=1, updates=2, eval_batches=2, eval_rows=2, buffer=1000)
FINISHED = (("baseline_s43", "original", 43), ("segmented_s43", "segment_first", 43), ("baseline_s44", "original", 44))
FAST = ["--per-stratum", "4", "--replicates", "50", "--device", "cpu"]


@pytest.fixture(scope="module")
def partial_runs(small_corpus, tmp_path_factory):
    """Three finished runs of the six, and one started but never finished."""
    runs = tmp_path_factory.mktemp("partial_runs")
    for name, loader, seed in FINISHED:
        ov = {**BASE, "loader": loader, "seed": seed, "name": name, "data_dir": str(small_corpus)}
        train(resolve_config(None, [f"{k}={v}" for k, v in ov.items()]), runs / name, log=lambda m: None)
    (runs / "random_crop_s43").mkdir()
    (runs / "random_crop_s43" / "train_log.jsonl").write_text("")
    return runs


def _one_line_error(capsys, rc, *needles):
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error: "), err
    for n in needles:
        assert n in err, err
    return err


def _protocol(small_corpus, runs_dir, ranked=None):
    rec = Layout(small_corpus, "stdlib").prepared()
    n_val = open_split(small_corpus, "stdlib", "val").n
    runs = {n: json.loads((runs_dir / n / "summary.json").read_text())["config"] for n, _, _ in FINISHED}
    plan = evaluation_plan("stdlib", n_val, 32, 2, 2, per_stratum=4, replicates=50, run_names=list(runs), buffer=1000)
    if ranked:
        plan["ranking"].update({"population": sorted(ranked), "reference": ranked[0]})
    plan["confirmation_fingerprint"] = confirmation_fingerprint(small_corpus, "stdlib", plan, 2)
    return {"name": "faults", "frozen_at_utc": "2026-01-01T00:00:00Z", "runs": runs, "evaluation": plan,
            "corpus": {"source": "stdlib", "shards_sha256": rec["shards_sha256"], "tokenizer_sha256": rec["tokenizer_sha256"]},
            "code_sha256": code_sha256()}


def _checker(capsys, script, folder):
    """checkers/SCRIPT FOLDER as its command line answers, by its main() in this process: tests/test_eval.py runs the
    command lines themselves on a real evaluation; here the checks' verdict on a partial set (3 numpy imports fewer,
    ~0.45 s of CPU)."""
    main_ = importlib.import_module(f"checkers.{script.removesuffix('.py')}").main
    capsys.readouterr()
    rc = main_([str(folder)])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(script, rc, out, err)


def test_partial_set_is_evaluated_as_found_absent_runs_named_every_output_unconfirmed(partial_runs, tmp_path,
                                                                                       capsys):
    out = tmp_path / "ev"
    assert eval_main(["--runs", str(partial_runs), "--out", str(out), "--exploratory", *FAST]) == 0
    report = (out / "report.md").read_text()
    head = report.split("\n## ")[0]
    assert head.startswith("# Evaluation of 3 checkpoints (UNCONFIRMED)")
    for name, why in (("random_crop_s43", "unfinished: no summary.json"), ("random_crop_s44", "no run folder"),
                      ("segmented_s44", "no run folder")):
        assert f"{name} ({why})" in head
    # cells only where a condition has its same-seed baseline; the numpy checkers agree from the evidence alone
    for p in ("dev", "conf"):
        s = json.loads((out / f"window_summary_{p}.json").read_text())
        assert s["params"]["pairs"] == [["segmented", 43]]
        assert s["cells"] and {(c["condition"], c["seed"]) for c in s["cells"]} == {("segmented", 43)}
        assert any(c["tail_delta"] != 0 for c in s["cells"])  # two different models were compared
    for chk in ("verify_window_evidence.py", "verify_evaluation_summary.py", "verify_confirmation.py"):
        r = _checker(capsys, chk, out)
        assert r.returncode == 0 and "0 failed" in r.stdout and "NOTE" not in r.stdout, r.stdout + r.stderr
    # the default ranked set (seed 43), not the folder's contents: baseline_s44 is present but not ranked
    rk = json.loads((out / "rankings.json").read_text())
    assert rk["methods"] == ["baseline_s43", "segmented_s43"] and rk["missing"] == ["random_crop_s43"]
    # every file, table and figure says unconfirmed
    for f in out.glob("*.json"):
        assert "UNCONFIRMED" in json.loads(f.read_text())["status"], f
    for f in out.glob("*/*.parquet"):
        assert b"UNCONFIRMED" in pq.read_schema(f).metadata[b"status"], f
    for f in out.glob("*.npz"):
        assert "UNCONFIRMED" in str(np.load(f)["status"]), f
    headings = [ln for ln in report.splitlines() if ln.startswith("#")]
    assert len(headings) > 8 and all("(UNCONFIRMED)" in h for h in headings)
    for png in ("contrasts_forest.png", "bin_contributions.png", "prefix_rankings.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in report
    # what the scaled prefixes stand for, and that development's "declared" cells are the paper's confirmation ones
    assert "The prefixes stand for the declared 262,144 / 2,097,152 / 10,485,760 (the paper's)" in report
    assert "The paper declares these contrasts on confirmation only: on development they are the same cells" in report


def test_confirmation_needs_a_protocol_which_decides_the_ranked_set(partial_runs, small_corpus, tmp_path, capsys):
    out = tmp_path / "ev"
    rc = eval_main(["--runs", str(partial_runs), "--out", str(out), "--device", "cpu"])
    _one_line_error(capsys, rc, "needs a frozen protocol", "--exploratory")
    assert not out.exists()
    ranked = ["baseline_s44", "baseline_s43", "segmented_s43"]  # not the default set: the protocol decides
    write_protocol(tmp_path / "protocol.json", _protocol(small_corpus, partial_runs, ranked))
    assert eval_main(["--runs", str(partial_runs), "--out", str(out), "--protocol", str(tmp_path / "protocol.json"),
                      "--device", "cpu", "--no-figures"]) == 0
    rk = json.loads((out / "rankings.json").read_text())
    assert rk["methods"] == sorted(ranked) and rk["reference"] == "baseline_s44"
    assert sum(len(p["contrasts"]) for p in rk["prefixes"]) == 2 * 3
    report = (out / "report.md").read_text()
    assert "UNCONFIRMED" not in report and "confirmation under protocol faults" in report
    assert "2 methods x 3 prefixes = 6 contrasts" in report
    checks = json.loads((out / "stream_checks.json").read_text())
    assert checks["fingerprints"] == {"conf": True, "dev": True}
    # an unconfirmed pass may not write into a confirmed folder
    capsys.readouterr()
    rc = eval_main(["--runs", str(partial_runs), "--out", str(out), "--exploratory", *FAST])
    _one_line_error(capsys, rc, "holds results of another pass")
    # a mistyped --runs is named first, not the (default) --out beside it that holds another pass
    rc = eval_main(["--runs", str(tmp_path / "nope"), "--out", str(out), "--exploratory", *FAST])
    _one_line_error(capsys, rc, f"{tmp_path / 'nope'}: no such folder of runs")


def test_stream_checks_match_the_independent_replay_and_refuse_before_scoring(partial_runs, small_corpus, tmp_path,
                                                                              capsys):
    from checkers.packing_checker import replay

    full = open_split(small_corpus, "stdlib", "val")
    half = full.n // 2
    conf = open_split(small_corpus, "stdlib", "val", row_range=(half, full.n))
    for B in (40, 1000):
        got = audit_stream(conf, 8, 33, B, 33)
        refills = [conf.lengths[a:b].tolist() for a, b in zip(conf.refills[:-1], conf.refills[1:])]
        events, _ = replay(refills, "original", 33, B, 8)
        want = max(int(conf.lengths[e[0] % conf.n]) for e in events if e[2] > 0)
        assert got["longest_emitted"] == want and got["holds"] == (want <= 33)
    with pytest.raises(DataError, match="section 5.4 check fails before scoring"):
        require({"conf": {**audit_stream(conf, 8, 33, 40, 33), "section": "5.4", "claim": "x"}})
    # through the command: an evaluation buffer of 40 and 8-row batches let long sources into both streams; nothing is written
    runs = tmp_path / "runs"
    shutil.copytree(partial_runs, runs)
    for s in runs.glob("*/summary.json"):
        res = json.loads(s.read_text())
        res["config"].update(eval_buffer=40, eval_rows=8)
        s.write_text(json.dumps(res))
    rc = eval_main(["--runs", str(runs), "--out", str(tmp_path / "ev"), "--exploratory", *FAST])
    _one_line_error(capsys, rc, "check fails before scoring", "B=40")
    assert not (tmp_path / "ev").exists()


def test_a_locked_output_folder_is_refused_naming_the_holder(partial_runs, tmp_path, capsys):
    out = tmp_path / "ev"
    with folder_lock(out, "a test"):
        rc = eval_main(["--runs", str(partial_runs), "--out", str(out), "--exploratory", *FAST])
    _one_line_error(capsys, rc, f"pid {os.getpid()}")
    assert sorted(p.name for p in out.iterdir()) == []  # nothing written, and the holder's lock file is gone with it


def test_an_out_among_the_runs_and_a_run_folder_as_runs_are_one_line_and_write_nothing(partial_runs, capsys):
    """An evaluation once wrote its report, figures and per-run statistics into the training runs' folders; and a
    run's own folder as --runs said only "no finished runs"."""
    before = sorted(str(p.relative_to(partial_runs)) for p in partial_runs.rglob("*"))
    rc = eval_main(["--runs", str(partial_runs), "--out", str(partial_runs), "--exploratory", *FAST])
    _one_line_error(capsys, rc, f"--out {partial_runs}: is the runs folder")
    for inside in (partial_runs / "baseline_s43" / "ev", partial_runs / "random_crop_s43" / "ev"):  # finished or not
        rc = eval_main(["--runs", str(partial_runs), "--out", str(inside), "--exploratory", *FAST])
        _one_line_error(capsys, rc, f"--out {inside}: is inside the runs folder")
    assert sorted(str(p.relative_to(partial_runs)) for p in partial_runs.rglob("*")) == before
    rc = eval_main(["--runs", str(partial_runs / "baseline_s43"), "--exploratory", *FAST])
    _one_line_error(capsys, rc, "it is one run's folder: give the folder that holds the runs, "
                                f"--runs {partial_runs}")


def test_corrupt_summary_and_protocols_give_one_line(partial_runs, small_corpus, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(partial_runs, runs)
    (runs / "baseline_s44" / "summary.json").write_text('{"updates": 2, "config": ')
    rc = eval_main(["--runs", str(runs), "--out", str(tmp_path / "ev"), "--exploratory", *FAST])
    _one_line_error(capsys, rc, "baseline_s44/summary.json", "not a readable JSON summary")

    proto = tmp_path / "protocol.json"
    write_protocol(proto, _protocol(small_corpus, partial_runs))
    (tmp_path / "protocol.json.sha256").write_text("")
    rc = eval_main(["--runs", str(partial_runs), "--out", str(tmp_path / "ev"), "--protocol", str(proto)])
    _one_line_error(capsys, rc, "protocol.json.sha256", "empty")
    for garbage, needle in ((b"\x00garbage{", "not a JSON protocol"), (b"[1, 2]", "must be a JSON object"),
                            (b'{"name": "x"}', "protocol key 'frozen_at_utc' missing")):
        proto.write_bytes(garbage)
        import hashlib

        (tmp_path / "protocol.json.sha256").write_text(f"{hashlib.sha256(garbage).hexdigest()}  protocol.json\n")
        rc = eval_main(["--runs", str(partial_runs), "--out", str(tmp_path / "ev"), "--protocol", str(proto)])
        _one_line_error(capsys, rc, "protocol.json", needle)
    assert not (tmp_path / "ev").exists()


def test_manifest_refuses_extra_files_empty_manifests_and_garbage_lines(partial_runs, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(partial_runs, runs)
    m = tmp_path / "checkpoints.sha256"
    assert manifest_main(["write", str(runs), "--glob", "ckpt_*.pt", "--out", str(m)]) == 0
    assert subprocess.run(["sha256sum", "-c", "--strict", m.name], cwd=tmp_path, capture_output=True).returncode == 0
    assert manifest_main(["verify", str(m)]) == 0
    shutil.copy(runs / "baseline_s43" / "ckpt_000002.pt", runs / "baseline_s43" / "ckpt_000001.pt")
    capsys.readouterr()
    assert manifest_main(["verify", str(m)]) == 1
    assert "EXTRA     runs/baseline_s43/ckpt_000001.pt" in capsys.readouterr().out
    assert manifest_main(["verify", str(m), "--allow-extra"]) == 0
    m.write_text("")
    assert manifest_main(["verify", str(m)]) == 1
    assert "empty manifest" in capsys.readouterr().out
    lines = [f"{'0' * 64}  runs/baseline_s43/ckpt_000002.pt", "", "this is not a manifest line"]
    m.write_text("\n".join(lines) + "\n")
    assert manifest_main(["verify", str(m)]) == 1
    out = capsys.readouterr().out
    assert f"{m}:3: not a '<sha256>  <path>' line" in out and "MISMATCH  runs/baseline_s43/ckpt_000002.pt" in out


def test_the_gate_rescores_every_checkpoint_and_checks_the_frozen_confirmation_stream(partial_runs, small_corpus,
                                                                                      tmp_path, capsys, monkeypatch):
    """As the paper: each checkpoint reloaded and re-scored bit for bit before confirmation; the
    confirmation stream is the frozen one to the document (issue 20)."""
    import eval.confirmation

    proto = tmp_path / "protocol.json"
    write_protocol(proto, _protocol(small_corpus, partial_runs))
    runs = tmp_path / "runs"
    shutil.copytree(partial_runs, runs)
    argv = ["--runs", str(runs), "--protocol", str(proto), "--device", "cpu", "--no-figures"]
    summary = runs / "segmented_s43" / "summary.json"
    good = summary.read_text()
    s = json.loads(good)
    s["official"]["bpb"] -= 1e-4  # a better recorded score than the checkpoint gives
    summary.write_text(json.dumps(s))
    rc = eval_main(argv + ["--out", str(tmp_path / "e1")])
    _one_line_error(capsys, rc, "segmented_s43", "official bpb", "refusing to confirm")
    summary.write_text(good)
    rows = runs / "baseline_s44" / "official_rows.parquet"
    t = pq.read_table(rows)
    nats = t.column("nats").to_numpy().copy()
    nats[1] *= 0.5
    pq.write_table(t.set_column(t.schema.get_field_index("nats"), "nats", [nats]), rows)  # metadata kept
    rc = eval_main(argv + ["--out", str(tmp_path / "e2")])
    _one_line_error(capsys, rc, "baseline_s44", "does not reproduce the recorded official nats", "row 1")
    shutil.copy(partial_runs / "baseline_s44" / "official_rows.parquet", rows)
    real = eval.confirmation.find_duplicates

    def one_more(data_dir, source, rows_):  # the stream loses one document the protocol froze
        dups = real(data_dir, source, rows_)
        extra = next(r for r in range(*rows_) if r not in {d for d, _ in dups})
        return sorted(dups + [(extra, "test")])

    monkeypatch.setattr(eval.confirmation, "find_duplicates", one_more)
    rc = eval_main(argv + ["--out", str(tmp_path / "e3")])
    _one_line_error(capsys, rc, "confirmation stream's fingerprint", "refusing to confirm")
    monkeypatch.undo()
    assert not any((tmp_path / f"e{i}").exists() for i in (1, 2, 3))


def test_an_unwritable_or_full_output_folder_is_one_line_and_changes_nothing(partial_runs, tmp_path, capsys,
                                                                             monkeypatch):
    """Issue 20: a full or read-only disk gives one line naming the path; what was there stays as it was."""
    import errno

    import corpus.atomic

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc = eval_main(["--runs", str(partial_runs), "--out", str(blocker / "ev"), "--exploratory", *FAST])
    # a folder cannot be made inside a file: said before the runs are re-scored or the streams checked
    _one_line_error(capsys, rc, str(blocker / "ev"), "cannot be made")

    out = tmp_path / "ev"
    out.mkdir()
    (out / "report.md").write_text("an earlier report")
    runs_before = {p: p.read_bytes() for p in partial_runs.rglob("*") if p.is_file() and p.name != ".lock"}

    def full(fd):  # what a full disk answers when the written data is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus.atomic.os, "fsync", full)
    rc = eval_main(["--runs", str(partial_runs), "--out", str(out), "--exploratory", *FAST])
    _one_line_error(capsys, rc, str(out), "free disk space")
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]  # no half-written or temporary file, no lock file
    assert (out / "report.md").read_text() == "an earlier report"
    assert {p: p.read_bytes() for p in partial_runs.rglob("*") if p.is_file() and p.name != ".lock"} == runs_before


def test_exploratory_runs_are_matched_by_their_configs_not_their_folder_names(partial_runs, tmp_path, capsys):
    """A folder whose run is not what its name says, two folders of one run, or runs that differ in budget,
    model or evaluation population are refused before anything is scored or written."""
    runs, out = tmp_path / "runs", tmp_path / "ev"
    shutil.copytree(partial_runs, runs)
    argv = ["--runs", str(runs), "--out", str(out), "--exploratory", *FAST]
    shutil.copytree(runs / "baseline_s43", runs / "segmented_s44")
    rc = eval_main(argv)
    _one_line_error(capsys, rc, "segmented_s44: holds a baseline_s43 run (loader original, seed 43), not segmented_s44")
    shutil.move(runs / "segmented_s44", runs / "extra")
    rc = eval_main(argv)
    _one_line_error(capsys, rc, "both hold a baseline_s43 run")
    shutil.rmtree(runs / "extra")
    summary = runs / "baseline_s44" / "summary.json"
    s = json.loads(summary.read_text())
    s["config"].update(updates=20, width=64)
    summary.write_text(json.dumps(s))
    rc = eval_main(argv)
    _one_line_error(capsys, rc, "baseline_s44: differs from baseline_s43 in updates (20 vs 2), width (64 vs 32)",
                    "differ only in loader and seed")
    assert not out.exists()


def test_code_or_judge_changed_since_the_freeze_is_recorded_as_not_a_clean_confirmation(partial_runs, small_corpus,
                                                                                        tmp_path):
    from protocols.protocol import judge_sha256

    p = _protocol(small_corpus, partial_runs)
    p["code_sha256"]["eval/official.py"] = "0" * 64
    p["judge_sha256"] = {**judge_sha256(), "checkers/packing_checker.py": "0" * 64}
    write_protocol(tmp_path / "protocol.json", p)
    out = tmp_path / "ev"
    assert eval_main(["--runs", str(partial_runs), "--out", str(out), "--protocol", str(tmp_path / "protocol.json"),
                      "--device", "cpu", "--no-figures"]) == 0
    st = json.loads((out / "eval_status.json").read_text())
    assert st["code_changed_since_freeze"] == ["checkers/packing_checker.py", "eval/official.py"]
    assert st["status"].endswith("; NOT A CLEAN CONFIRMATION: 2 hashed files changed since the freeze "
                                 "(checkers/packing_checker.py, eval/official.py)")
    assert (out / "report.md").read_text().splitlines()[2] == f"Status: **{st['status']}**."
    assert json.loads((out / "confirmation.json").read_text())["status"] == st["status"]
    # a protocol frozen before the judge was hashed: compared on its code alone, and said so
    del p["judge_sha256"]
    write_protocol(tmp_path / "old_protocol.json", p)
    assert eval_main(["--runs", str(partial_runs), "--out", str(tmp_path / "ev_old"), "--protocol",
                      str(tmp_path / "old_protocol.json"), "--device", "cpu", "--no-figures"]) == 0
    st = json.loads((tmp_path / "ev_old" / "eval_status.json").read_text())
    assert st["code_changed_since_freeze"] == ["eval/official.py"]
    assert st["status"].endswith("; NOT A CLEAN CONFIRMATION: 1 hashed files changed since the freeze (eval/official.py)"
                                 "; the protocol predates judge_sha256: only its code was compared, not the checkers "
                                 "and rules")


def test_the_frozen_judge_covers_what_the_readme_calls_the_fixed_judge():
    from protocols.protocol import judge_sha256

    files = set(code_sha256()) | set(judge_sha256())
    for f in ("checkers/packing_checker.py", "checkers/verify_window_evidence.py", "findings/paper_values.json",
              "shardqueue/policy/rule.py", "shardqueue/study/adoption.py", "eval/official.py", "eval/rescore.py",
              "protocols/protocol.py", "comparison/freeze.py"):
        assert f in files, f


def test_a_folder_of_another_pass_is_refused_before_any_checkpoint_is_rescored(partial_runs, small_corpus, tmp_path,
                                                                               capsys, monkeypatch):
    import eval.rescore

    def no_rescoring(*args, **kw):
        raise AssertionError("re-scored before the output folder was checked")

    monkeypatch.setattr(eval.rescore, "check_all_reproduce", no_rescoring)
    write_protocol(tmp_path / "protocol.json", _protocol(small_corpus, partial_runs))
    out = tmp_path / "ev"
    out.mkdir()
    (out / "eval_status.json").write_text(json.dumps({"mode": "exploratory", "status": "EXPLORATORY, UNCONFIRMED",
                                                      "protocol_sha256": None}))
    rc = eval_main(["--runs", str(partial_runs), "--out", str(out), "--protocol", str(tmp_path / "protocol.json"),
                    "--device", "cpu"])
    _one_line_error(capsys, rc, f"{out} holds results of another pass (EXPLORATORY, UNCONFIRMED); use a fresh --out")
    assert [p.name for p in out.iterdir()] == ["eval_status.json"]


def test_official_names_the_checkpoint_to_pass_for_a_run_folder_or_its_sidecar(partial_runs, capsys):
    from eval.official import main as official_main

    run = partial_runs / "baseline_s43"
    rc = official_main([str(run), "--device", "cpu"])
    _one_line_error(capsys, rc, f"error: {run}: a folder; pass the checkpoint inside it, e.g. {run / 'ckpt_000002.pt'}")
    rc = official_main([str(run / "ckpt_000002.json"), "--device", "cpu"])
    _one_line_error(capsys, rc,
                    f"error: {run / 'ckpt_000002.json'}: a checkpoint's sidecar; pass the checkpoint {run / 'ckpt_000002.pt'}")
    rc = official_main([str(run / "summary.json"), "--device", "cpu"])  # was "unreadable or truncated ... sidecar"
    _one_line_error(capsys, rc, f"error: {run / 'summary.json'}: not a checkpoint; pass a ckpt_<updates>.pt, e.g. "
                                f"{run / 'ckpt_000002.pt'}")


def test_official_refuses_an_out_that_is_a_folder_before_it_evaluates(partial_runs, tmp_path, capsys, monkeypatch):
    import eval.official as official

    def never(*a, **k):
        raise AssertionError("evaluated before --out was checked")

    monkeypatch.setattr(official, "evaluate_checkpoint", never)
    (tmp_path / "kept.parquet").write_bytes(b"an earlier result")
    ckpt = partial_runs / "baseline_s43" / "ckpt_000002.pt"
    rc = official.main([str(ckpt), "--device", "cpu", "--out", str(tmp_path)])
    _one_line_error(capsys, rc, f"error: --out {tmp_path}: is a folder, not a file")
    assert [p.name for p in tmp_path.iterdir()] == ["kept.parquet"]
    assert (tmp_path / "kept.parquet").read_bytes() == b"an earlier result"


def test_protocol_fixed_parameters_are_refused_and_the_last_line_counts_the_figures(partial_runs, small_corpus, tmp_path,
                                                                                   capsys):
    write_protocol(tmp_path / "protocol.json", _protocol(small_corpus, partial_runs))
    rc = eval_main(["--runs", str(partial_runs), "--out", str(tmp_path / "e1"), "--protocol",
                    str(tmp_path / "protocol.json"), "--replicates", "50"])
    _one_line_error(capsys, rc, "error: --replicates: fixed by the protocol for a confirmation pass; drop it")
    assert not (tmp_path / "e1").exists()
    out = tmp_path / "e2"
    assert eval_main(["--runs", str(partial_runs), "--out", str(out), "--exploratory", *FAST, "--no-figures"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == (f"wrote {out}/report.md, stream_checks.json, window_summary_*.json, confirmation.json, "
                         "rankings.json, no figures (--no-figures) and evidence files")
    rk = json.loads((out / "rankings.json").read_text())
    pre = [p["rows"] * 32 for p in rk["prefixes"]]
    assert rk["declared"]["prefix_targets"] == pre and pre != [262144, 2097152, 10485760]
    assert rk["declared"]["paper_prefix_targets"] == [262144, 2097152, 10485760]
