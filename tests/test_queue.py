"""The rollback shard queue on a real tiny model: whole-shard training, exact rollback,
resume at four points, calibration that can fail, frozen manifests, inspection, the log."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import main as main_job
from conftest import QUEUE_CFG, QUEUE_SETTINGS, ROOT, one_line_error, queue_script
from test_queue_reference import CAL_NAME, reference_runs

from errors import DataError
from records.reexecution import Reexecution
from shardqueue import api as rq
from shardqueue import calibration
from shardqueue.engine import run_folder
from shardqueue.checks.reexecute import compare_records, reexecute, reexecute_folder
from shardqueue.checks.replay import reconstruct_folder
from shardqueue.engine.log import line_of, read_log, record_sha256, verify_chain
from shardqueue.engine.packing import shard_rows, shard_tokens, update_batches
from shardqueue.engine.branch_check import branch_check
from shardqueue.engine.runner import Runner
from shardqueue.engine.training import params_sha256
from shardqueue.policy.rule import calibrate as calibrate_rule
from shardqueue.policy.rule import clopper_pearson_upper, held_out_rate
from shardqueue.settings import QueueSettings
from shardqueue.world.rotation import shard_docs
from training.checkpoint import checkpoint_step, load_checkpoint, save_checkpoint

cli = queue_script("run_queue")  # the command line, called in-process
CFG, SETTINGS = QUEUE_CFG, QUEUE_SETTINGS  # the `calibrated` fixture's (conftest.py)



def test_standard_library_queue_still_wins():
    import queue

    assert hasattr(queue, "Queue") and "site-packages" not in queue.__file__ and "/queue/" not in queue.__file__


def test_calibration_writes_its_plan_first_and_measures_held_out(calibrated):
    d, rec = calibrated["dir"], calibrated["rec"]
    plan = json.loads((d / "calibration_plan.json").read_text())
    assert plan["k_grid"] == rec["k_grid"] and plan["frac_grid"] == rec["frac_grid"]
    assert not set(rec["sigma_shards"]) & set(rec["held_out_shards"])
    assert len(rec["states"]) == SETTINGS["sigma_shards"] + SETTINGS["held_out_shards"] + 2
    # sigma_d is the spread of the sigma shards' deltas, recomputed here from the logged states
    for dom, s in rec["sigma"].items():
        deltas = np.diff([st[dom] for st in rec["states"][: SETTINGS["sigma_shards"] + 1]])
        assert s == pytest.approx(np.std(deltas, ddof=1))
    assert len(rec["grid"]) == len(rec["k_grid"]) * len(rec["frac_grid"])


def test_a_shard_trains_every_token_once(calibrated):
    cfg, world, pool, _ = rq.open_calibration(calibrated["dir"])
    for sh in pool["shards"][:4]:
        toks = shard_tokens(world.stream, shard_docs(sh))
        # slow, obvious reference: the documents' tokens one by one
        ref = [int(t) for i in shard_docs(sh) for t in world.stream.doc_tokens(i)]
        assert toks.tolist() == ref and len(ref) == sh["tokens"]
        x, y = shard_rows(toks, cfg.context, world.bos)
        trained = [int(t) for upd in update_batches(x, y, cfg.micro_rows, cfg.accum) for _, yy in upd
                   for t in yy[yy >= 0].ravel()]
        assert sorted(trained) == sorted(ref) and trained == ref  # every token a target once, in order
        flat_x = x.ravel()[: len(ref)]
        assert flat_x[0] == world.bos and flat_x[1:].tolist() == ref[:-1]  # each target's input is its predecessor


def _state(tr):
    from training.checkpoint import rng_states

    return tr.trainer.state_dict(), rng_states()


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def test_rollback_equals_a_run_that_never_saw_the_shard(calibrated):
    cfg, world, pool, calib = rq.open_calibration(calibrated["dir"])
    ids = pool["order"]

    def runner():
        torch.manual_seed(0)
        r = Runner(cfg, world, pool, calib, calibrated["dir"] / "unused", log=lambda s: None)
        r.ref = {}
        return r

    a, b = runner(), runner()
    a.train_shard(ids[0])
    b.train_shard(ids[0])
    snap = a.snapshot()
    a.train_shard(ids[1])  # the shard that will be rejected
    torch.rand(3)  # consume RNG as later work would
    assert params_sha256(a.trainer.model) != snap["params_sha256"]
    a.restore(snap)
    for r in (a, b):
        r.train_shard(ids[2])
    (sa, ra), (sb, rb) = _state(a), _state(b)
    assert _equal(sa["model"], sb["model"]) and _equal(sa["adamw"], sb["adamw"]) and _equal(sa["muon"], sb["muon"])
    assert _equal(ra, rb) and a.step == b.step and a.targets == b.targets


PLAN_KEYS = {f.name for f in dataclasses.fields(rq.RunPlan)}


def _run(calibrated, out, **kw):
    """A run on the strict calibration: the run plan's keys make its plan, the others go to run()."""
    plan = rq.RunPlan(**{k: kw.pop(k) for k in list(kw) if k in PLAN_KEYS})
    return rq.run(out, calibrated["strict"], plan, log=lambda s: None, report=kw.pop("report", False), **kw)


@pytest.fixture(scope="session")
def full_run(calibrated, tmp_path_factory):
    """The strict run, the one tests/test_queue_reference.py compares byte for byte (made once, its clock and run
    id fixed), with a spy that keeps a copy of the parameters at every snapshot and compares the model with that
    copy, tensor by tensor, after every rollback. Its calibration lies beside it, in CAL_NAME."""
    made = reference_runs(calibrated, tmp_path_factory)
    out = made["copy"] / "queue"
    return out, made["summaries"]["queue"], read_log(out / "decisions.jsonl"), made["restored"]


TIMING = ("time", "seq", "spent", "seconds", "calibration_dir", "run_id", "prev_sha256")  # the chain hashes times


def _strip(obj):
    """Records without timestamps, wall times, seq numbers and `resumed` records (what may differ)."""
    if isinstance(obj, list):
        return [_strip(x) for x in obj if not (isinstance(x, dict) and x.get("event") == "resumed")]
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMING}
    return obj


def test_the_accepted_targets_are_those_of_the_trainings_kept(full_run):
    """Counted from the log another way: each `accept` takes the targets of its shard's training just before it.
    The recovery shard here was trained five times and rolled back four: only the kept training counts."""
    _, summary, recs, _ = full_run
    last, kept = {}, 0
    for r in recs:
        if r["event"] == "train" and r["role"] != "branch":
            last[r["shard"]] = r["targets"]
        elif r["event"] == "accept":
            kept += last[r["shard"]]
    trained = [r for r in recs if r["event"] == "train" and r["shard"] in summary.accepted and r["role"] != "branch"]
    assert len(trained) > len(summary.accepted)  # some accepted shard had a try rolled back: the case that differs
    assert summary.accepted_records_targets == kept


def test_accepted_targets_count_each_accept_once_with_its_shards_training_just_before_it():
    """Worked by hand: c1 flagged, r0 recovers it (both accepted); c2 flagged, r0 (back in the reserve) recovers it
    again (accepted twice: it trained twice); s5 tried, rolled back, tried again and accepted; a branch never counts."""
    from shardqueue.checks.run_summary import accepted_targets

    def t(shard, n, role="candidate"):
        return {"event": "train", "shard": shard, "targets": n, "role": role}

    def acc(shard):
        return {"event": "accept", "shard": shard}

    recs = [t("c1", 100), t("r0", 50, "recovery"), acc("c1"), acc("r0"), t("c2", 100), t("r0", 50, "recovery"),
            acc("c2"), acc("r0"), t("s5", 70), {"event": "rollback", "shard": "s5"}, t("b9", 40, "branch"),
            t("s5", 80), acc("s5")]
    assert accepted_targets(recs) == 100 + 50 + 100 + 50 + 80


def test_the_candidate_that_reaches_the_budget_is_accepted_without_its_recovery_shard(calibrated, full_run, tmp_path):
    """A candidate flagged and recovered keeps its recovery shard in the model's history, except the one whose
    acceptance reaches the budget: kept there, the recovery shard would end the stable phase up to two shards past
    the budget (a study found 13,603 targets for 8,843), where a run whose last candidate was not flagged ends less
    than one shard past it. It is undone once it has judged the candidate, back to the reserve's front, and counted
    as wasted recovery work; the replay accepts such an undo only at the budget."""
    from shardqueue.checks.replay import check_records
    from shardqueue.checks.report import compute_lines
    from shardqueue.study.accounting import accounting
    from shardqueue.world.rotation import load_rotation

    pool = json.loads((calibrated["strict"] / "pool.json").read_text())
    tokens = {s["id"]: s["tokens"] for s in pool["shards"]}
    # in the strict run: the first candidate recovered, and the tokens accepted before it
    i = next(i for i, r in enumerate(full_run[2]) if r["event"] == "accept" and r.get("note") == "recovered")
    sid, before = full_run[2][i]["shard"], sum(tokens[s] for s in full_run[2][i - 1]["queue"]["accepted"])
    budget = before + 1  # the same run up to it, where its acceptance now reaches the budget
    out = tmp_path / "b"
    _run(calibrated, out, budget_targets=budget, decay_updates=2)  # as a study's arm: the decay inside the queue
    recs = read_log(out / "decisions.jsonl")
    j = next(j for j, r in enumerate(recs) if r["event"] == "accept" and r["shard"] == sid)
    undo, trained = recs[j - 1], recs[j - 2]
    assert recs[j]["note"] == "recovered" and trained["role"] == "recovery" and trained["tested"] == sid
    assert (undo["event"], undo["shard"], undo["to"]) == ("return_front", trained["shard"], "reserve")
    assert recs[j]["queue"]["reserve"][0] == trained["shard"] not in recs[j]["queue"]["accepted"]
    start = next(r for r in recs if r["event"] == "decay_start")
    candidate = next(r for r in reversed(recs[:j]) if r["event"] == "train" and r["shard"] == sid)
    # the stable phase ends with the candidate: its history, less than one shard past the budget
    assert start["history_targets"] == candidate["history_targets"]
    assert 0 <= before + tokens[sid] - budget < tokens[sid]
    # the work kept is the stable phase's history, the undone recovery shard's counted as wasted
    acc = accounting(recs)
    assert acc["accepted_targets"] == start["history_targets"] - recs[0]["start_targets"]
    wasted = f"| wasted: recovery shards rolled back | {acc['wasted_updates']['recovery']} |"
    assert any(ln.startswith(wasted) for ln in compute_lines(recs))  # report.md's compute table counts it so too
    assert reconstruct_folder(out, out=lambda s: None) == 0
    far = [dict(recs[0], budget_targets=budget + 10 ** 6)] + recs[1:]  # the same undo, far below the budget
    with pytest.raises(DataError, match=f"a recovery shard undone, but accepting {sid} does not reach the budget"):
        check_records(_rechained(far), load_rotation(calibrated["strict"] / "pool.json"),
                      json.loads((calibrated["strict"] / "calibration.json").read_text()), out)


def test_the_strict_rule_walks_the_whole_path(calibrated, full_run):
    out, summary, recs, restored = full_run
    events = [(r["event"], r.get("outcome")) for r in recs]
    assert ("reject", "deferred") in events and ("reject", "quarantined") in events
    assert any(r["event"] == "rotation" and r["rotation"] == 2 for r in recs)
    q = summary.quarantined[0]
    assert (out / "inspection" / f"{q}.md").exists() and json.loads((out / "inspection" / f"{q}.json").read_text())
    # every rollback restored the pre-shard parameters bitwise, and the log names that state's hash
    rollbacks = [r for r in recs if r["event"] == "rollback"]
    assert rollbacks and len(restored) >= len(rollbacks)  # branch checks restore too
    assert all(bitwise for _, bitwise in restored)
    assert {r["params_sha256"] for r in rollbacks} <= {got for got, _ in restored}
    # every recovery shard is a reserve shard of the calibration source, never a candidate
    pool = json.loads((calibrated["strict"] / "pool.json").read_text())
    used = {r["shard"] for r in recs if r["event"] == "train" and r["role"] == "recovery"}
    assert used and used <= set(pool["reserve"]) and not used & set(pool["order"])
    shards = {s["id"]: s for s in pool["shards"]}
    assert all(set(shards[c]["sources"]) == {pool["calibration_source"]} for c in pool["reserve"])
    assert reconstruct_folder(out, out=lambda s: None) == 0
    report = (out / "report.md").read_text()
    assert (out / "decisions.parquet").exists() and report.count("| ") > 10
    # no report set in this calibration: the transitions that chose k and frac also measured the rate
    assert "First-rotation rejections get a branch check, mode **clean**" in report
    assert "False rejections (in-sample)" in report and "in-sample (the same transitions chose k and frac" in report
    assert summary.final.official > 0 and set(summary.final.selection)


def test_resume_after_interruptions_gives_the_same_log_and_model(calibrated, full_run, tmp_path, monkeypatch):
    """One run killed at four kinds of place, resumed after each: at a log write (the checkpoint
    holding the record exists, the log line does not), at the first training after a resume, at a candidate's
    training and at a recovery shard's. Every resume runs the rest of the queue, so one chain costs one run where three runs
    cost three. Each stage's records are compared with the uninterrupted run's before the next kill
    (a stage commits several records first), so a resume that went wrong shows in the records it
    wrote and cannot be hidden by the next resume from a checkpoint."""
    from shardqueue.engine import log as decision_log  # the module, to patch its writer

    out_full, _, recs_full, _ = full_run
    want = _strip(recs_full)
    out = tmp_path / "cut"
    kill = {"where": None, "train": 0, "write": 0}  # the stage's kind of place and its calls since it started
    # (the recovery kill waits for records of its own stage: the `resumed` record and two more)
    orig_train, orig_dw = Runner.train_shard, decision_log.DecisionLog.write

    def dying_train(self, sid, *a, **k):
        kill["train"] += 1
        flagged = self.state["flagged"] is not None
        if (kill["where"] == "candidate" and kill["train"] == 4) or (kill["where"] == "resumed" and kill["train"] == 1) \
                or (kill["where"] == "recovery" and flagged and kill["train"] > 2 and kill["write"] > 2):
            raise KeyboardInterrupt
        return orig_train(self, sid, *a, **k)

    def dying_write(self, rec):
        kill["write"] += 1
        if kill["where"] == "log-write" and kill["write"] == 6:
            raise KeyboardInterrupt  # the checkpoint holding this record exists; the log line does not
        return orig_dw(self, rec)

    monkeypatch.setattr(Runner, "train_shard", dying_train)
    monkeypatch.setattr(decision_log.DecisionLog, "write", dying_write)
    before, done = b"", 0
    # "resumed": killed at the first training after a resume, so the next resume starts from the checkpoint taken at
    # the `resumed` record (it holds the machine's versions: a torch version object there made it unreadable)
    for where in ("log-write", "resumed", "candidate", "recovery", None):  # None: resumed to the end
        kill.update(where=where, train=0, write=0)
        if where is None:
            _run(calibrated, out, resume=True)
        else:
            with pytest.raises(KeyboardInterrupt):
                _run(calibrated, out, resume=bool(before))
        after = (out / "decisions.jsonl").read_bytes()
        assert after.startswith(before)  # appended to, never rewritten
        got = _strip(read_log(out / "decisions.jsonl"))
        assert len(got) >= done + (where != "resumed") and got == want[:len(got)], where  # the uninterrupted run's
        before, done = after, len(got)
    recs = read_log(out / "decisions.jsonl")
    assert [r["event"] for r in recs].count("resumed") == 4
    assert len({r["run_id"] for r in recs}) == 1
    b = _strip(recs)
    assert [(r["event"], r.get("shard")) for r in want] == [(r["event"], r.get("shard")) for r in b]
    assert want == b
    pa = torch.load(out_full / "final.pt", weights_only=True)["trainer"]["model"]
    pb = torch.load(out / "final.pt", weights_only=True)["trainer"]["model"]
    assert _equal(pa, pb)
    # re-execution takes the `resumed` record from the log at its place (issue 30): the first one, which
    # follows the record the log-write kill left only in its checkpoint
    resumed = next(r["seq"] for r in recs if r["event"] == "resumed")
    rx = reexecute(out, to_record=resumed + 1)
    assert rx.comparison.difference is None and rx.made[resumed - 1]["event"] == "resumed"


def test_a_run_killed_after_done_before_its_report_gets_it_on_resume_without_training(calibrated, full_run, tmp_path,
                                                                                      monkeypatch):
    out = tmp_path / "done"
    shutil.copytree(full_run[0], out)
    for name in ("report.md", "decisions.csv", "decisions.parquet", "control_curves.png"):
        (out / name).unlink()  # killed after its summary, inside the report's writing
    log_before = (out / "decisions.jsonl").read_bytes()
    monkeypatch.setattr(Runner, "train_shard", lambda *a, **k: pytest.fail("a finished run trained again"))
    _run(calibrated, out, resume=True, report=True)
    assert (out / "decisions.jsonl").read_bytes() == log_before
    assert all((out / n).exists() for n in ("report.md", "decisions.csv", "decisions.parquet", "control_curves.png"))
    assert (out / "report.md").read_text() == (full_run[0] / "report.md").read_text()


def test_torn_last_line_is_reported_saved_and_dropped(full_run, tmp_path):
    out = tmp_path / "torn"
    shutil.copytree(full_run[0], out)
    log = out / "decisions.jsonl"
    good = log.read_bytes()
    log.write_bytes(good + b'{"seq": 999, "event": "acc')
    said = []
    recs = read_log(log, repair=True, log=said.append)
    assert len(recs) == len(full_run[2]) and "torn last line" in said[0]
    assert log.read_bytes() == good and (out / "decisions.jsonl.torn").read_bytes().startswith(b'{"seq": 999')


def test_a_damaged_newest_checkpoint_is_named_with_what_to_do_not_blamed_on_the_log(calibrated, full_run, tmp_path,
                                                                                      capsys):
    """A new user's probe: the newest checkpoint truncated after an interrupted run, `run --resume` fell back to the
    one before it and said the log and that checkpoint "do not belong together", which they do: the log is ahead of
    any older checkpoint. Here the run's last checkpoint is cut short and its summary gone (a run killed at its end)."""
    out = tmp_path / "damaged"
    shutil.copytree(full_run[0], out)
    (out / "queue_summary.json").unlink()
    newest, older = sorted(out.glob("ckpt_*.pt"), reverse=True)[:2]
    newest.write_bytes(newest.read_bytes()[:1000])
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"]), "--resume"])
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("warning:")]
    assert rc == 2 and len(err) == 1 and "do not belong together" not in err[0], err
    n = len(read_log(out / "decisions.jsonl"))
    assert err[0].startswith(f"error: {newest}: damaged, and the newest checkpoint that verifies, {older.name}, was "
                             "written at record ") and f"of the {n} decisions.jsonl holds" in err[0], err[0]
    assert "restore the damaged checkpoint, or start the run again with --fresh" in err[0]


def _killed_with_its_newest_checkpoint_damaged(calibrated, full_run, tmp_path, cut, damage):
    """A copy of the strict run as a kill during the commit after its second newest checkpoint left it (its last
    checkpoint, final.pt and summary not written; `cut` of that commit's records not yet in the log), that
    checkpoint then damaged (the probe's `truncate -s 1000`, or its sidecar deleted); its calibration where the run
    names it. Returns (folder, damaged checkpoint, the one before it)."""
    out = _unfinished_copy(full_run, tmp_path, "damaged")
    shutil.copytree(calibrated["strict"], tmp_path / CAL_NAME)
    last, newest, older = sorted(out.glob("ckpt_*.pt"), reverse=True)[:3]
    for f in (last, last.with_suffix(".json"), out / "final.pt", out / "final.json"):
        f.unlink()
    lines = (out / "decisions.jsonl").read_text().splitlines(keepends=True)
    (out / "decisions.jsonl").write_text("".join(lines[:checkpoint_step(newest) - cut]))
    if damage == "truncated":
        newest.write_bytes(newest.read_bytes()[:1000])
    else:
        newest.with_suffix(".json").unlink()
    return out, newest, older


@pytest.mark.parametrize("cut,damage", [(0, "truncated"), (2, "sidecar deleted")])
def test_a_damaged_newest_checkpoint_is_resumed_by_re_executing_the_records_after_the_one_before(
        calibrated, full_run, tmp_path, capsys, cut, damage):
    """A new user's probe: an interrupted run whose newest checkpoint was damaged could not be resumed (the older
    checkpoint is always behind the log). The resume goes back to the older checkpoint, re-executes the log's
    records after it, each checked against the logged one and none appended again, and goes on: the log and the
    model are the uninterrupted run's, the log still one chain that re-executes bitwise. cut 2: the kill came
    inside the commit's log writes, so the damaged checkpoint also held two records the log lacks: made anew."""
    out, newest, older = _killed_with_its_newest_checkpoint_damaged(calibrated, full_run, tmp_path, cut, damage)
    log = out / "decisions.jsonl"
    before, held, C = log.read_bytes(), len(read_log(log)), checkpoint_step(older)
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"]), "--resume"])
    said = capsys.readouterr()
    assert rc == 0, said.err
    assert f"note: {newest.name} did not verify; resuming from {older.name} (record {C}) by re-executing records " \
           f"{C + 1}-{held} of decisions.jsonl, each checked against the log" in said.out
    assert log.read_bytes().startswith(before)  # appended to, the re-executed records not written twice
    recs = read_log(log)
    verify_chain(recs, log)
    assert _strip(recs) == _strip(full_run[2])
    resumed = [r for r in recs if r["event"] == "resumed"]
    assert [(r["seq"], r["checkpoint"], r["log_seq"], r["reexecuted"], r["damaged"]) for r in resumed] == \
        [(checkpoint_step(newest) + 1, older.name, C, [C + 1, held], [newest.name])]
    assert load_checkpoint(newest)["records"] == recs[C:checkpoint_step(newest)]  # written again: the log's records
    pa = torch.load(full_run[0] / "final.pt", weights_only=True)["trainer"]["model"]
    pb = torch.load(out / "final.pt", weights_only=True)["trainer"]["model"]
    assert _equal(pa, pb)
    if cut:  # the whole log, the `resumed` record taken from it at its place, re-executes bitwise (3 s)
        assert reexecute(out).comparison.difference is None


def test_a_log_the_re_execution_after_a_damaged_checkpoint_does_not_reproduce_is_refused_in_one_line(
        calibrated, full_run, tmp_path, capsys):
    """The log's records after the older checkpoint, one edited and rechained as a forger would: the resume that
    re-executes them names the first that differs, and leaves the log and the damaged checkpoint as they were."""
    out, newest, older = _killed_with_its_newest_checkpoint_damaged(calibrated, full_run, tmp_path, 0, "truncated")
    recs = read_log(out / "decisions.jsonl")
    target = next(r for r in recs[checkpoint_step(older):] if r["event"] == "train")
    _write_log(out, _rechained([dict(r, train_loss=r["train_loss"] + 0.5) if r is target else r for r in recs]))
    before, damaged = (out / "decisions.jsonl").read_bytes(), newest.read_bytes()
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"]), "--resume"])
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("warning:")]
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {newest}: damaged, and re-executing decisions.jsonl's records "
                             f"{checkpoint_step(older) + 1}-{len(recs)} from {older.name} (the newest checkpoint that "
                             f"verifies) does not give the logged ones: record {target['seq']} (train): train_loss: "
                             f"logged {target['train_loss'] + 0.5!r}, re-executed {target['train_loss']!r}"), err[0]
    assert err[0].endswith("restore the damaged checkpoint, or start the run again with --fresh (this run is moved "
                           "aside)")
    assert (out / "decisions.jsonl").read_bytes() == before and newest.read_bytes() == damaged


def test_resume_refuses_a_log_that_does_not_match_the_checkpoint(calibrated, full_run, tmp_path, capsys):
    out = tmp_path / "mismatch"
    shutil.copytree(full_run[0], out)
    (out / "queue_summary.json").unlink()
    log = out / "decisions.jsonl"
    recs = read_log(log)
    extra = dict(recs[-1], seq=len(recs) + 1, event="accept", shard=recs[1]["order"][0])
    with open(log, "a") as f:
        f.write(json.dumps(extra) + "\n")
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"]), "--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "do not belong together" in err[0]


def test_fresh_run_refuses_a_used_folder_unless_fresh_which_moves_it_aside(calibrated, full_run, tmp_path, capsys):
    out = tmp_path / "used"
    shutil.copytree(full_run[0], out)
    old = (out / "decisions.jsonl").read_bytes()
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"])])
    assert rc == 2 and "--fresh" in capsys.readouterr().err
    assert (out / "decisions.jsonl").read_bytes() == old
    dest, moved = run_folder.move_aside(out, "calibration")
    assert (dest / "decisions.jsonl").read_bytes() == old and "decisions.jsonl" in moved
    assert not list(out.glob("ckpt_*.pt"))


def test_an_out_folder_holding_files_no_queue_command_wrote_is_refused_and_left_untouched(calibrated, tmp_path, capsys):
    """Before, `run --out` wrote its report.md over a user's and `calibrate --out` its config.json over a user's,
    exiting 0. A name of a command's own counts as its own only beside that command's earlier output (a report.md
    beside no decision log is the user's); anything else in --out is refused in one line and nothing is written."""
    import argparse

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("MY OWN REPORT\n")
    rc = cli.main(["run", "--calibration", str(calibrated["dir"]), "--out", str(mine), "--budget-targets", "1"])
    one_line_error(capsys, rc, f"--out {mine}: holds report.md, not an earlier calibration's, run's or dose's output,",
                   "give a new or empty folder, or move them")
    own = {k: v for k, v in CFG.items() if k != "width"}  # the user's own config: a key short of stage A's
    (tmp_path / "config.json").write_text(json.dumps({**own, "data_dir": str(calibrated["data"])}))
    rc = cli.main(["calibrate", "--config", str(tmp_path / "config.json"), "--out", str(tmp_path)])
    one_line_error(capsys, rc, "holds config.json, mine, not an earlier calibration's")
    beside = tmp_path / "beside"  # run's default --calibration is its --out: a file of the user's beside stage A's
    shutil.copytree(calibrated["dir"], beside)
    (beside / "notes.txt").write_text("mine\n")
    one_line_error(capsys, cli.main(["run", "--out", str(beside)]), f"--out {beside}: holds notes.txt, not an earlier")
    assert os.listdir(mine) == ["report.md"] and (mine / "report.md").read_text() == "MY OWN REPORT\n"
    # a resume writes only its run's names beside its log: a file dropped beside an interrupted run does not strand it
    shutil.copy(calibrated["dir"] / "calibration.json", tmp_path / "calibration.json")
    (tmp_path / "decisions.jsonl").write_text("")
    cli.check_reads(argparse.Namespace(command="run", calibration=None, resume=True, add_source=[]), tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == {**own, "data_dir": str(calibrated["data"])}
    assert sorted(os.listdir(beside)) == sorted(os.listdir(calibrated["dir"]) + ["notes.txt"])


def test_a_queue_commands_own_earlier_output_is_its_own(calibrated, full_run, tmp_path):
    """What calibrate, run and dose write, read from real folders: a run beside its calibration, a run apart, a
    calibration a kill cut short after its first files, dose's results and a run moved aside by --fresh beside them,
    a torn write and the lock. No name of theirs counts without its command's marker beside it."""
    from shardqueue.out_folder import QUEUE_FOLDER, foreign_entries

    assert foreign_entries(full_run[0], QUEUE_FOLDER) == [] and (full_run[0] / "inspection").is_dir()
    assert foreign_entries(calibrated["dir"], QUEUE_FOLDER) == []
    q = tmp_path / "q"
    shutil.copytree(calibrated["dir"], q)
    for f in full_run[0].iterdir():
        (shutil.copytree if f.is_dir() else shutil.copy)(f, q / f.name)
    for name in ("dose.json", "dose.md", ".report.md.x1y2.tmp", ".lock", "previous/20261208T000000/report.md"):
        (q / name).parent.mkdir(parents=True, exist_ok=True)
        (q / name).write_text("")
    assert foreign_entries(q, QUEUE_FOLDER) == []
    cut = tmp_path / "cut"
    cut.mkdir()
    for name in ("pool.json", "pool.json.sha256", "calibration_plan.json", "config.json", "calibrated_config.json"):
        shutil.copy(calibrated["dir"] / name, cut / name)
    assert foreign_entries(cut, QUEUE_FOLDER) == []
    for name in ("report.md", "config.json", "decisions.csv", "final.pt"):  # a name of theirs, no marker beside it
        lone = tmp_path / f"lone_{name}"
        lone.mkdir()
        (lone / name).write_text("")
        assert foreign_entries(lone, QUEUE_FOLDER) == [name]


@pytest.mark.parametrize("bad,needle", [
    ({"data_dir": "NODATA"}, "corpus not prepared"),
    ({"candidates": 100000}, "reserve shards, 4 needed"),
], ids=["data_dir", "candidates"])
def test_calibrate_fresh_that_cannot_calibrate_leaves_the_earlier_calibration_in_place(calibrated, tmp_path, bad,
                                                                                      needle):
    # a helper's rerun: calibrate --fresh with a typo'd data_dir (or a pool the corpus cannot fill) moved the earlier
    # calibration into previous/ and then refused, leaving a folder that a `run` could no longer use
    out = tmp_path / "cal"
    shutil.copytree(calibrated["dir"], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    cfg = {**CFG, "data_dir": str(tmp_path / "nodata") if bad.get("data_dir") else str(calibrated["data"])}
    settings = {**SETTINGS, **{k: v for k, v in bad.items() if k != "data_dir"}}
    with pytest.raises(DataError, match=re.escape(needle)):
        rq.calibrate(out, None, [f"{k}={v}" for k, v in cfg.items()], settings, fresh=True)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == before


def test_run_fresh_with_a_bad_new_source_leaves_the_earlier_run_in_place(calibrated, full_run, tmp_path, capsys):
    # a helper's rerun: run --fresh --add-source NEW=F with an unreadable F moved the finished run into previous/
    # and then refused F; a --resume after it found nothing to resume
    out = tmp_path / "used"
    shutil.copytree(full_run[0], out)
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet\n")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"]), "--fresh",
                   "--add-source", f"new={junk}"])
    one_line_error(capsys, rc, f"{junk}: not a readable parquet file")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == before


def test_checkpoints_of_another_run_are_refused(calibrated, full_run, tmp_path):
    out = tmp_path / "other"
    shutil.copytree(full_run[0], out)
    (out / "queue_summary.json").unlink()
    recs = read_log(out / "decisions.jsonl")
    # the key with its value: the reference's fixed run id (twelve zeros) also occurs inside floats
    run_id = f'"run_id": "{recs[0]["run_id"]}"'
    text = (out / "decisions.jsonl").read_text().replace(run_id, '"run_id": "someoneelse0"')
    (out / "decisions.jsonl").write_text(text)
    with pytest.raises(DataError, match="belongs to run"):
        _run(calibrated, out, resume=True)


def test_an_active_manifest_cannot_be_changed(calibrated, full_run, tmp_path):
    out = tmp_path / "manifest"
    shutil.copytree(full_run[0], out)
    cfg, world, pool, calib = rq.open_calibration(calibrated["strict"])
    r = Runner(cfg, world, pool, calib, out, rq.RunPlan(seed=cfg.seed + 1), log=lambda s: None)  # another order
    r._owed = []
    with pytest.raises(DataError, match="cannot be changed"):
        r.start_rotation()
    p = out / "rotation_v1.json"
    p.write_text(p.read_text().replace('"version": 1', '"version": 2'))
    assert reconstruct_folder(out, out=lambda s: None) == 1


def test_return_needs_a_stopped_run_and_an_inspection_without_a_cause_happens_once_and_trains_next(
        calibrated, full_run, tmp_path, monkeypatch):
    """Refused on the finished run (no rotation is left: the shard would never train, yet read as returned). On the
    run stopped at its first training after a quarantine: refused without the inspection and with one that found a
    cause; then once, and the resumed run trains the shard in its next rotation, not before."""
    shutil.copytree(calibrated["strict"], tmp_path / CAL_NAME)  # where the runs name it
    finished = tmp_path / "finished"
    shutil.copytree(full_run[0], finished)
    q = full_run[1].quarantined[0]
    found = json.loads((finished / "inspection" / f"{q}.json").read_text())
    (finished / "inspection" / f"{q}.json").write_text(json.dumps({**found, "cause_found": False, "causes": []}))
    with pytest.raises(DataError, match="this run has finished, so a returned shard would never train: no rotation "
                                        "follows"):
        rq.return_from_quarantine(finished, q, log=lambda s: None)
    assert read_log(finished / "decisions.jsonl")[-1]["event"] == "done"  # nothing written

    out, train = tmp_path / "ret", Runner.train_shard
    trained = []

    def stopping(stop):
        def train_shard(self, sid, *a, **k):
            trained.append((sid, self.state["rotation"]))
            if stop(self, sid):
                raise KeyboardInterrupt
            return train(self, sid, *a, **k)
        return train_shard

    monkeypatch.setattr(Runner, "train_shard", stopping(lambda runner, sid: runner.state["quarantined"]))
    with pytest.raises(KeyboardInterrupt):
        _run(calibrated, out)
    recs = read_log(out / "decisions.jsonl")
    q, rotation = recs[-1]["shard"], recs[-1]["queue"]["rotation"]
    assert recs[-1]["event"] == "inspect" and recs[-1]["queue"]["quarantined"] == [q]
    (out / "inspection" / f"{q}.json").rename(tmp_path / "inspection.json")
    with pytest.raises(DataError, match="no inspection report"):
        rq.return_from_quarantine(out, q, log=lambda s: None)
    j = json.loads((tmp_path / "inspection.json").read_text())
    (out / "inspection" / f"{q}.json").write_text(json.dumps({**j, "cause_found": True, "causes": ["a cause"]}))
    with pytest.raises(DataError, match="found a cause"):
        rq.return_from_quarantine(out, q, log=lambda s: None)
    (out / "inspection" / f"{q}.json").write_text(json.dumps({**j, "cause_found": False, "causes": []}))
    assert rq.return_from_quarantine(out, q, log=lambda s: None) == 0
    assert read_log(out / "decisions.jsonl")[-1]["event"] == "return"
    with pytest.raises(DataError, match="not in quarantine"):
        rq.return_from_quarantine(out, q, log=lambda s: None)
    trained.clear()  # resumed, to the first training after the shard's own
    monkeypatch.setattr(Runner, "train_shard", stopping(lambda runner, sid: (q, rotation + 1) in trained[:-1]))
    with pytest.raises(KeyboardInterrupt):
        _run(calibrated, out, resume=True)
    assert [x for x in trained if x[0] == q] == [(q, rotation + 1)]
    recs = read_log(out / "decisions.jsonl")
    returned = next(r["seq"] for r in recs if r["event"] == "return")
    assert [(r["event"], r["queue"]["rotation"]) for r in recs if r.get("shard") == q and r["seq"] > returned] == \
        [("train", rotation + 1)]  # trained in the next rotation (stopped at the training after it)
    assert reconstruct_folder(out, out=lambda s: None) == 0


def test_policies_share_one_code_path(calibrated, tmp_path, tmp_path_factory):
    plain = _run(calibrated, tmp_path / "plain", policy="plain")
    recs = read_log(tmp_path / "plain" / "decisions.jsonl")
    assert not plain.rejections and [r["shard"] for r in recs if r["event"] == "accept"] == plain.accepted
    # the random policy's run on the strict calibration, reject rate 0.4, seed 5: the reference's (made once)
    made = reference_runs(calibrated, tmp_path_factory)
    r1, r1_dir = made["summaries"]["random"], made["copy"] / "random"
    log1 = read_log(r1_dir / "decisions.jsonl")
    trained = [r for r in log1 if r["event"] == "train" and r["role"] == "candidate"]
    # the random policy's draw, written out: flagged where a generator seeded (seed, 7919, position) draws below the
    # rate, so the same seed flags the same positions in any run
    drawn = [r["position"] for r in trained if np.random.default_rng([5, 7919, r["position"]]).random() < 0.4]
    assert [r["position"] for r in trained if r["flagged"]] == drawn and drawn
    assert r1.rejections and any(r["event"] == "rollback" for r in log1)
    assert plain.final.control.keys() == r1.final.control.keys()
    # the queue's own report renders a random-policy rejection (a draw, not a measured domain)
    assert "drawn by the random policy" in (r1_dir / "report.md").read_text()


def test_branch_check_returns_a_shard_when_a_clean_branch_rises_too(calibrated, tmp_path, monkeypatch):
    from shardqueue.engine import runner as queue_runner
    # every shard raises control loss by 1 (a "phase" effect): the clean branch on a reserve shard sees the
    # same rise, so the phase is blamed without a branch on the source (tests/test_queue_branch.py: each case)
    cfg, world, pool, calib = rq.open_calibration(calibrated["strict"])
    real = queue_runner.measure

    def phase(model, sets, tb, dev):
        out = real(model, sets, tb, dev)
        return {d: v + phase.bump for d, v in out.items()}

    phase.bump = 0.0
    r = Runner(cfg, world, pool, calib, tmp_path, log=lambda s: None)
    r.ref = r.measure_fn(r.trainer.model)
    r._owed, r.seq = [], 0
    r.state["flagged"] = None
    sid = next(s for s in pool["order"] if "library" in r.shards[s]["sources"])
    r.rollback = r.snapshot()
    monkeypatch.setattr(r, "measure_fn", lambda m: {d: v + 1.0 for d, v in real(m, world.sets["control"],
                                                                                  world.token_bytes, "cpu").items()})
    r.state["fresh"] = [s for s in pool["order"] if s != sid]
    outcome = branch_check(r, sid, sorted(r.ref))
    rec = r._owed[-1]
    assert rec["event"] == "branch" and rec["possible"] and rec["verdict"] == "phase" and outcome == "returned"
    assert [(b["kind"], b["shard"], b["rose"]) for b in rec["branches"]] == [("clean", pool["reserve"][0], True)]
    assert rec["params_sha256"] == r.rollback["params_sha256"] == params_sha256(r.trainer.model)


def test_clopper_pearson_and_a_calibration_that_fails():
    assert clopper_pearson_upper(0, 59) == pytest.approx(1 - 0.05 ** (1 / 59), rel=1e-6)
    assert clopper_pearson_upper(3, 3) == 1.0
    rng = np.random.default_rng(0)
    quiet = [{"a": float(x)} for x in 3 - np.cumsum(np.abs(rng.normal(0, 0.01, 11)))]
    # held-out transitions that keep rising by far more than any k on the grid times sigma
    noisy = [{"a": 1.0 + 0.5 * t} for t in range(8)]
    rec = calibrate_rule(quiet, noisy)
    assert not rec["ok"] and "no grid point" in rec["reason"]
    assert held_out_rate(noisy, rec["sigma"], 6.0, 0.5) == (6, 6)
    ok = calibrate_rule(quiet, quiet)
    assert ok["ok"] and ok["false_rejection_rate"] < 0.05


def test_cli_calibrate_failure_is_one_line_and_nonzero(calibrated, tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**CFG, "data_dir": str(calibrated["data"])}))
    real = calibration.calibrate_rule
    monkeypatch.setattr(calibration, "calibrate_rule", lambda s, h: real(s, [{d: 1.0 + 50.0 * t for d in s[0]} for t in range(6)]))
    args = ["calibrate", "--config", str(cfg), "--out", str(tmp_path / "q")] + \
           [x for k, v in SETTINGS.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("calibration shards")]
    assert len(lines) == 1 and lines[0].startswith("error: calibration failed") and "Traceback" not in err


def test_a_domain_stage_a_finds_no_text_for_is_one_line_and_leaves_no_folder(calibrated, tmp_path, capsys):
    """A new user's probe: a domains file whose rule matches no validation document was refused in stage A, after the
    command had made its --out folder, which it left behind, empty."""
    cfg, dom = tmp_path / "cfg.json", tmp_path / "d.json"
    cfg.write_text(json.dumps({**CFG, "data_dir": str(calibrated["data"])}))
    dom.write_text(json.dumps({"control": {"nothing": {"labels": ["no-such-label"]}}}))
    args = ["calibrate", "--config", str(cfg), "--domains", str(dom), "--out", str(tmp_path / "q")] + \
           [x for k, v in SETTINGS.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    assert cli.main(args) == 2
    assert capsys.readouterr().err.strip().endswith("control domain 'nothing' matches no validation document")
    assert not (tmp_path / "q").exists()


def test_cli_calibrate_says_under_its_line_a_prose_shard_it_could_not_plant(calibrated, tmp_path, monkeypatch,
                                                                             capsys):
    """The command reads the pool it wrote: no shard of role 'prose' though one was asked for (the default) is a note
    under the calibrated line (stage A itself replaced here: only the command's reading of its folder is tested)."""
    from shardqueue import api

    def stage_a(out, *a, **k):
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "pool.json").write_text(json.dumps({"roles": {"c0": "calibration"}, "calibration_source": "docs"}))
        return {"ok": True, "k": 2.5, "frac": 0.5, "false_rejections": 0, "transitions": 12, "upper95": 0.2,
                "sigma": {"docs": 0.01}}

    monkeypatch.setattr(api, "calibrate", stage_a)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**CFG, "data_dir": str(calibrated["data"])}))
    assert cli.main(["calibrate", "--config", str(cfg), "--out", str(tmp_path / "q")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("calibrated: k=2.5") and lines[-1].startswith("note: no document is labelled 'prose'")


@pytest.mark.parametrize("argv,needle", [
    (["reconstruct", "updates=5"], "--set key=value"),
    (["reconstruct"], "no such queue folder"),
    (["run", "--set", "updates=5"], "'--set updates=5' for `run`"),  # run has no --set: calibrate's option
    (["run", "--harm", "cipher"], "'--harm cipher' for `run`"),  # each command takes only its own options
])
def test_cli_one_line_errors(tmp_path, capsys, argv, needle):
    rc = cli.main([*argv, "--out", str(tmp_path / "none")])  # in-process: the process itself is checked below
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(lines) == 1 and needle in lines[0], lines


@pytest.mark.parametrize("argv,needle", [
    (["run", "--fresh", "--resume"], "argument --resume: not allowed with argument --fresh"),
    (["run", "--resume", "--fresh"], "argument --fresh: not allowed with argument --resume"),
    (["run", "--policy", "bogus"], "argument --policy: invalid choice: 'bogus'"),  # argparse's own refusals too
])
def test_resume_and_fresh_are_refused_together_in_one_line(tmp_path, capsys, argv, needle):
    """--resume continues the earlier run, --fresh moves it aside: given both, neither silently wins."""
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--out", str(tmp_path / "q")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not (tmp_path / "q").exists()


def test_a_harmful_shard_the_queue_accepted_is_the_runs_result_not_an_error(calibrated, tmp_path, capsys,
                                                                            monkeypatch):
    """A finished run that let the planted cipher shard through exits 0: it says so on a `result:` line and in
    report.md's first section, and queue_summary.json lists the shard (before: an `error:` line and status 1,
    after the report was written, as if the input were at fault)."""
    from shardqueue.policy.measured import QueueRule

    monkeypatch.setattr(QueueRule, "flag", lambda self, position, ref, after: [])  # a rule that flags nothing
    out = tmp_path / "q"
    rc = cli.main(["run", "--calibration", str(calibrated["dir"]), "--out", str(out)])
    printed, err = capsys.readouterr()
    harmful = json.loads((out / "queue_summary.json").read_text())["harmful_accepted"]
    assert rc == 0 and harmful and "error" not in err, err
    assert f"\nresult: harmful shard(s) {', '.join(harmful)} ended accepted without a return: the queue let a " \
           "planted harmful shard through" in printed
    report = (out / "report.md").read_text()
    first = report.index("\n## ")
    assert report[first:].startswith("\n## Outcome: a harmful shard got through\n\n**The queue ended with "
                                     f"{len(harmful)} of the {len(harmful)} planted harmful shard(s) accepted")
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 when the run finished, whatever the queue decided." in helped


def test_the_report_opens_with_what_became_of_the_planted_harmful_shards(full_run):
    """Caught, the planted shards are named with their fate; accepted by the plain or random policy, by design;
    a pool with none planted gets no such section."""
    from dataclasses import replace

    from shardqueue.checks.report import harmful_lines

    summary = full_run[1]
    pool = {"roles": {"h0000": "harmful", "h0001": "harmful", "s0001": "candidate"}}
    caught = replace(summary, policy="queue", harmful_accepted=[], harmful_quarantined=["h0000"])
    assert harmful_lines(caught, pool) == [
        "## Outcome", "", "Planted harmful shards h0000, h0001: accepted without a return: none; quarantined: h0000; "
        "neither: h0001.", ""]
    plain = replace(summary, policy="plain", harmful_accepted=["h0000", "h0001"], harmful_quarantined=[])
    assert harmful_lines(plain, pool)[2].endswith("quarantined: none (policy plain does not judge shards by their "
                                                  "losses: it accepts harm by design).")
    assert harmful_lines(caught, {**pool, "roles": {"s0001": "candidate"}}) == []


def test_a_run_that_ran_out_of_candidates_says_it_did_not_reach_its_budget(full_run):
    """The strict run quarantines shards until its candidates run out, short of its budget; its report's header
    named the budget alone and the console line only the targets accepted (as on a new user's corpus: 17,009 of
    20,911), as if the budget had been trained."""
    from dataclasses import replace

    from shardqueue.runs import describe_run

    out, summary = full_run[0], full_run[1]
    budget = json.loads((out / "decisions.jsonl").read_text().splitlines()[0])["budget_targets"]
    got = summary.accepted_tokens
    assert got < budget and summary.quarantined
    said = (f"budget was not reached: {got:,} of {budget:,} accepted targets ({got / budget:.0%}); the candidates "
            f"ran out ({len(summary.quarantined)} quarantined, {len(summary.undecided)} undecided, "
            f"{len(summary.deferred_pending)} deferred and pending)")
    assert f"\n\n**The {said}.**\n\n" in (out / "report.md").read_text()
    assert describe_run(summary, out)[0].endswith(f"\nthe {said}")
    assert "not reached" not in describe_run(replace(summary, accepted_tokens=budget), out)[0]


def test_the_script_run_as_a_process_refuses_in_one_line(tmp_path):
    """One refusal through a real `python queue/run_queue.py` (its exit status, and no import-time
    warning beside the line); the other messages are checked in-process above (each process pays
    the torch import)."""
    p = subprocess.run([sys.executable, str(ROOT / "queue" / "run_queue.py"), "run", "--harm", "cipher", "--out",
                        str(tmp_path / "none")], capture_output=True, text=True, cwd=ROOT)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "'--harm cipher' for `run`" in lines[0], p.stderr


@pytest.mark.parametrize("argv,needle", [
    (["run"], "calibration.json: not found"),
    (["run", "--calibration", "FAILED"], "calibration.json: the calibration failed (no grid point)"),
    (["run", "--calibration", "CAL", "--resume"], "decisions.jsonl: nothing to resume"),
    (["run", "--calibration", "CAL", "--add-source", "new=NOWHERE.parquet"], "NOWHERE.parquet: file not found"),
    (["dose", "--calibration", "NONE"], "calibration.json: not found"),
    (["dose", "--calibration", "CAL", "--trials", "0"], "--trials 0"),
    (["dose", "--calibration", "CAL", "--harm", "foo"], "--harm 'foo': not one of cipher, parquet"),
    (["dose", "--calibration", "CAL", "--harm", "parquet"], "--harm parquet needs --harm-parquet PATH"),
    (["dose", "--calibration", "CAL", "--harm", "parquet", "--harm-parquet", "NOWHERE.parquet"],
     "NOWHERE.parquet: file not found (--harm-parquet)"),
    (["calibrate", "--config", "NOWHERE.json", "--domains", "NOWHERE.json"], "NOWHERE.json: domains file not found"),
    (["return", "s001"], "decisions.jsonl: no decision log"),
])
def test_a_refused_command_leaves_no_folder_or_lock_behind(tmp_path, capsys, argv, needle):
    for name, rec in (("cal", {"ok": True}), ("failed", {"ok": False, "reason": "no grid point"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "calibration.json").write_text(json.dumps(rec))  # all the checks before the lock read
    argv = [a.replace("CAL", str(tmp_path / "cal")).replace("FAILED", str(tmp_path / "failed"))
            .replace("NONE", str(tmp_path / "none")).replace("NOWHERE", str(tmp_path / "x")) for a in argv]
    rc = cli.main(argv + ["--out", str(tmp_path / "q")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle.replace("NOWHERE", "x") in err[0], err
    assert not (tmp_path / "q").exists()


def test_reconstruct_and_return_give_a_folder_without_a_log_the_same_status(tmp_path, capsys):
    assert reconstruct_folder(tmp_path) == 2 == cli.main(["return", "s001", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(ln.endswith("decisions.jsonl: no decision log") for ln in err), err


def test_reconstruct_on_an_empty_log_is_one_line(tmp_path, capsys):
    (tmp_path / "decisions.jsonl").write_text("")
    assert reconstruct_folder(tmp_path) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty" in err[0]


def test_a_second_process_is_locked_out(calibrated, tmp_path, capsys):
    from corpus.runlock import folder_lock

    with folder_lock(tmp_path / "q", "test"):
        rc = cli.main(["run", "--out", str(tmp_path / "q"), "--calibration", str(calibrated["strict"])])
    assert rc == 2 and "in use by another process" in capsys.readouterr().err


def test_unlabeled_text_gets_deterministic_register_domains():
    from shardqueue.world.domains import domain_texts, register_of

    code = "import os\n\ndef f(x):\n    return x + 1\n\nclass A:\n    pass\n"
    qa = "Question: what is a shard?\nAnswer: a group of whole documents. Why? Who? How?"
    polish = "Zażółć gęślą jaźń — " * 3
    cyr = "Это пример текста на русском языке, написанный кириллицей."
    prose = "The queue trains one shard at a time and measures held-out losses after each."
    assert [register_of(t) for t in (code, qa, cyr, prose)] == ["code", "qa", "non_latin", "prose"]
    assert register_of(polish) == "prose"  # Latin script with diacritics stays Latin
    doms = domain_texts([code, code, qa, qa, prose, prose], ["climbmix"] * 6)
    assert set(doms) == {"code", "sel_code", "qa", "sel_qa", "prose", "sel_prose"}
    assert not {i for _, i in doms["code"]} & {i for _, i in doms["sel_code"]}


def test_a_new_source_enters_only_at_its_rotation_boundary(small_corpus, tmp_path):
    d = tmp_path / "cal"
    rq.calibrate(d, None, [f"{k}={v}" for k, v in {**CFG, "data_dir": str(small_corpus)}.items()],
                       {**SETTINGS, "late_shards": 1, "candidates": 5})
    c = json.loads((d / "calibration.json").read_text())
    c.update(ok=True, k=3.0, frac=0.5)
    (d / "calibration.json").write_text(json.dumps(c))
    pool = json.loads((d / "pool.json").read_text())
    late = pool["late_sources"][0]
    assert not set(late["shards"]) & set(pool["order"])  # not in the pool until admitted
    out = tmp_path / "run"
    rq.run(out, d, rq.RunPlan(rotation_shards=3, budget_targets=10 ** 9), log=lambda s: None, report=False)
    recs = read_log(out / "decisions.jsonl")
    src = [r for r in recs if r["event"] == "source"]
    assert len(src) == 1 and src[0]["passed"] and src[0]["admitted"] == late["shards"]
    before = [r for r in recs if r["seq"] < src[0]["seq"] and r["event"] == "rotation"]
    assert len(before) == late["enter_rotation"] - 1  # checked and admitted at the boundary, not earlier
    v1 = json.loads((out / "rotation_v1.json").read_text())
    assert not set(late["shards"]) & set(v1["order"])
    trained = [r["shard"] for r in recs if r["event"] == "train"]
    assert set(late["shards"]) <= set(trained) and not set(late["calibration"]) & set(trained)
    assert reconstruct_folder(out, out=lambda s: None) == 0


def _scripted_run(calibrated, tmp_path):
    """The main job's thresholds on scripted losses (see the test below): the runner, and each candidate's role."""
    from test_queue_rule import EPS, FRAC, K, REF, SIGMA

    cfg, world, pool, calib = rq.open_calibration(calibrated["dir"])
    calib = {**calib, "k": K, "frac": FRAC, "sigma": SIGMA}
    runner = Runner(cfg, world, pool, calib, tmp_path / "q", rq.RunPlan(branch_check=False, rotation_shards=5),
                    log=lambda s: None)
    roles, trained = {}, []  # candidate shard -> its part in the script, in order of first training

    def train_shard(sid, *a, **k):
        trained.append((sid, runner.state["flagged"]))
        if runner.state["flagged"] is None and sid not in roles:
            roles[sid] = ("low", "recovers", "bad")[len(roles)] if len(roles) < 3 else "plain"
        # no optimizer work: the losses are scripted, so training would only cost time (the
        # rollback itself is checked bitwise in the strict run above)
        n = runner.shards[sid]["tokens"]
        runner.step, runner.targets = runner.step + 1, runner.targets + n
        runner.spent["updates"] += 1
        runner.spent["targets"] += n
        return {"train_loss": 0.0, "updates": 1, "targets": n, "seconds": 0.0}

    def measure(model):
        if not trained:
            return dict(REF)
        sid, flagged = trained[-1]
        ref = runner.ref
        if flagged is not None:  # a recovery shard: where the flagged domain stands now
            if roles[flagged] == "recovers":
                return _plus(ref, "test_code", FRAC * K * SIGMA["test_code"] * (1 - EPS))
            return _plus(ref, "comments", FRAC * K * SIGMA["comments"] * (1 + EPS))
        if roles[sid] == "low":
            return {d: ref[d] + K * SIGMA[d] * (1 - EPS) for d in ref}
        if roles[sid] == "recovers":
            return _plus(ref, "test_code", K * SIGMA["test_code"] * (1 + EPS))
        if roles[sid] == "bad":
            return _plus(ref, "comments", K * SIGMA["comments"] * (1 + EPS))
        return dict(ref)

    class Done(Exception):
        pass

    def candidate_step():
        if runner.state["quarantined"]:
            raise Done  # the path is complete; the remaining plain shards would only cost time
        Runner.candidate_step(runner)

    runner.train_shard, runner.measure_fn, runner.candidate_step = train_shard, measure, candidate_step
    try:
        runner.run()
    except Done:
        pass
    return runner, roles


def test_rejection_path_at_the_main_jobs_thresholds(calibrated, tmp_path):
    """The runner's decisions on losses placed just inside and just outside the thresholds of
    the main job's calibration (k 2.5, frac 0.5, its sigma_d): a candidate just below k*sigma_d
    in every domain is accepted; one just above in one domain is flagged and, back just inside
    frac*k*sigma_d, recovers; one just above that stays just outside is rolled back and
    deferred, and on its second rejection (rotation 2) quarantined."""
    from test_queue_rule import FRAC, K, SIGMA

    runner, roles = _scripted_run(calibrated, tmp_path)
    recs = read_log(tmp_path / "q" / "decisions.jsonl")
    by = {v: k for k, v in roles.items() if v != "plain"}
    cand = {r["shard"]: r for r in recs if r["event"] == "train" and r["role"] == "candidate"}
    assert cand[by["low"]]["flagged"] == [] and cand[by["recovers"]]["flagged"] == ["test_code"]
    assert cand[by["low"]]["thresholds"] == pytest.approx({d: K * SIGMA[d] for d in SIGMA}, rel=1e-12)
    recov = [r for r in recs if r["event"] == "train" and r["role"] == "recovery"]
    assert recov[0]["tested"] == by["recovers"] and recov[0]["unrecovered"] == []
    assert recov[0]["limits"] == pytest.approx({"test_code": FRAC * K * SIGMA["test_code"]}, rel=1e-12)
    accepts = [(r["shard"], r["note"]) for r in recs if r["event"] == "accept"]
    assert (by["low"], "") in accepts and (by["recovers"], "recovered") in accepts
    bad = [r for r in recs if r.get("shard") == by["bad"] or r.get("tested") == by["bad"]]
    path = [(r["event"], r.get("role"), r.get("outcome")) for r in bad if r["event"] in ("train", "reject")]
    assert path == [("train", "candidate", None), ("train", "recovery", None), ("reject", None, "deferred"),
                    ("train", "candidate", None), ("train", "recovery", None), ("reject", None, "quarantined")]
    assert all(r["unrecovered"] == ["comments"] for r in bad if r["event"] == "reject")
    rounds = [r["rotation"] for r in recs if r["event"] == "rotation"]
    rot_of = {}
    rot = 0
    for r in recs:  # the rotation in which each rejection happened
        rot = r["rotation"] if r["event"] == "rotation" else rot
        if r["event"] == "reject":
            rot_of[r["outcome"]] = rot
    assert rot_of == {"deferred": 1, "quarantined": 2} and rounds[:2] == [1, 2]
    assert any(r["event"] == "inspect" and r["shard"] == by["bad"] for r in recs)
    assert runner.state["quarantined"] == [by["bad"]] and by["bad"] not in runner.state["accepted"]


def _plus(base, d, amount):
    return {**base, d: base[d] + amount}


def _unfinished_copy(full_run, tmp_path, name):
    out = tmp_path / name
    shutil.copytree(full_run[0], out)
    (out / "queue_summary.json").unlink()
    return out


def test_resume_refuses_any_difference_from_the_start_record(calibrated, full_run, tmp_path, monkeypatch):
    """Seed, policy, calibration (an edited k) and corpus are each refused, naming the field (issue 20)."""
    out = _unfinished_copy(full_run, tmp_path, "differs")
    before = (out / "decisions.jsonl").read_bytes()
    with pytest.raises(DataError, match=re.escape("another seed (43 when the run started, 99 now)")):
        _run(calibrated, out, resume=True, seed=99)
    with pytest.raises(DataError, match="another policy"):
        _run(calibrated, out, resume=True, policy="plain")
    edited = tmp_path / "k50"
    shutil.copytree(calibrated["strict"], edited)
    c = json.loads((edited / "calibration.json").read_text())
    c["k"] = 50
    (edited / "calibration.json").write_text(json.dumps(c))
    with pytest.raises(DataError, match="another calibration"):
        rq.run(out, edited, resume=True, log=lambda s: None, report=False)
    from shardqueue import runs

    monkeypatch.setattr(runs, "corpus_identity", lambda cfg: {"build_id": "0" * 64, "tokenizer_sha256": "1" * 64})
    with pytest.raises(DataError, match="another corpus"):
        _run(calibrated, out, resume=True)
    assert (out / "decisions.jsonl").read_bytes() == before


def test_an_edited_early_record_breaks_the_chain(calibrated, full_run, tmp_path, capsys):
    out = _unfinished_copy(full_run, tmp_path, "edited")
    shutil.copytree(calibrated["strict"], tmp_path / CAL_NAME)  # where the run names it
    lines = (out / "decisions.jsonl").read_text().splitlines()
    i = next(j for j, ln in enumerate(lines) if json.loads(ln)["event"] == "train")
    rec = json.loads(lines[i])
    rec["train_loss"] += 0.5
    rec["history_targets"] += 1
    lines[i] = json.dumps(rec, sort_keys=True)
    (out / "decisions.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=f"record {rec['seq'] + 1} does not chain"):
        _run(calibrated, out, resume=True)
    assert reconstruct_folder(out, out=lambda s: None) == 1
    assert "does not chain" in capsys.readouterr().err


def test_a_kill_after_done_writes_the_summary_without_a_resumed_record(calibrated, full_run, tmp_path):
    out = _unfinished_copy(full_run, tmp_path, "after_done")
    before = (out / "decisions.jsonl").read_bytes()
    (out / ".queue_summary.json.x1y2.tmp").write_text("{")  # the killed write's leftover
    summary = _run(calibrated, out, resume=True)
    assert (out / "decisions.jsonl").read_bytes() == before  # nothing appended after "done"
    assert summary == full_run[1] and summary.spent["updates"] > 0
    assert not list(out.glob(".*.tmp"))


def test_a_kill_inside_the_final_decay_resumes_to_the_same_end(calibrated, full_run, tmp_path):
    out = _unfinished_copy(full_run, tmp_path, "in_decay")
    recs = read_log(out / "decisions.jsonl")
    last_ckpt = sorted(out.glob("ckpt_*.pt"))[-1]  # the commit of the decay and done records
    last_ckpt.unlink()
    last_ckpt.with_suffix(".json").unlink()
    lines = (out / "decisions.jsonl").read_text().splitlines()
    (out / "decisions.jsonl").write_text("\n".join(lines[:-2]) + "\n")
    # killed after the decay checkpoint was saved, before it became final.pt
    (out / "final.pt").rename(out / "ckpt_999999.pt")
    (out / "final.json").rename(out / "ckpt_999999.json")
    _run(calibrated, out, resume=True)
    again = read_log(out / "decisions.jsonl")
    assert [r["event"] for r in again][-3:] == ["resumed", "decay", "done"]
    assert _strip(again) == _strip(recs)
    pa = torch.load(full_run[0] / "final.pt", weights_only=True)["trainer"]["model"]
    pb = torch.load(out / "final.pt", weights_only=True)["trainer"]["model"]
    assert _equal(pa, pb)


def test_reconstruct_rehashes_shards_checks_relative_paths_and_malformed_records(calibrated, full_run, tmp_path):
    from protocols.protocol import write_protocol
    from shardqueue.checks.replay import check_records, rehashed_pool

    recs = read_log(full_run[0] / "decisions.jsonl")
    assert not Path(recs[0]["calibration_dir"]).is_absolute()
    # a copied run (with its calibration beside it, as before) checks against the copy, not the original
    moved = tmp_path / "moved"
    run, cal = moved / full_run[0].name, moved / CAL_NAME
    shutil.copytree(full_run[0], run)
    shutil.copytree(calibrated["strict"], cal)
    assert reconstruct_folder(run, out=lambda s: None) == 0
    c = json.loads((cal / "calibration.json").read_text())
    (cal / "calibration.json").write_text(json.dumps({**c, "k": 50}))
    assert reconstruct_folder(run, out=lambda s: None) == 1
    # a pool.json whose recorded shard SHA256 is not the token files' is found by re-hashing them
    bad = tmp_path / "badpool"
    shutil.copytree(calibrated["strict"], bad)
    pool = json.loads((bad / "pool.json").read_text())
    pool["shards"][0]["sha256"] = "0" * 64
    digest = write_protocol(bad / "pool.json", pool)
    c = json.loads((bad / "calibration.json").read_text())
    (bad / "calibration.json").write_text(json.dumps({**c, "pool_sha256": digest}))
    with pytest.raises(DataError, match="SHA256 differs"):
        rehashed_pool(bad, recs[0])
    # malformed records and calibrations: one line, never a traceback
    cal_rec = json.loads((calibrated["strict"] / "calibration.json").read_text())
    p = rq.open_calibration(calibrated["strict"])[2]
    # (the last record: an edit of any earlier one already breaks the chain)
    for broken_recs, broken_cal in ((recs[:-1] + [{k: v for k, v in recs[-1].items() if k != "event"}], cal_rec),
                                    (recs[:-1] + [{k: v for k, v in recs[-1].items() if k != "queue"}], cal_rec),
                                    (recs, {k: v for k, v in cal_rec.items() if k != "k"})):
        with pytest.raises(DataError, match="malformed"):
            check_records(broken_recs, p, broken_cal, full_run[0])


@pytest.mark.parametrize("argv,needle", [
    (["calibrate"], "calibrate needs --config CFG.json"),  # not the default, paper-scale model on any machine
    (["calibrate", "--config", "no/such.json"], "no/such.json: config file not found"),  # and no folder left
    (["run", "--rotation-shards", "0"], "--rotation-shards"),
    (["run", "--reject-rate", "0.5"], "reject rate 0.5: a reject rate is policy random's; policy queue takes none"),
    (["calibrate", "--per-domain", "0"], "--per-domain"),
    (["calibrate", "--sigma-shards", "0"], "--sigma-shards"),
    (["reconstruct", "--to-record", "0"], "--to-record"),
    (["reconstruct", "--tolerance", "-1"], "--tolerance"),
    (["reconstruct", "--tolerance", "nan"], "--tolerance"),
    (["calibrate", "--reserve-shards", "0"], "--reserve-shards"),
    (["calibrate", "--branch-check", "sideways"], "'branch_check': 'sideways' is not one of clean, literal"),
])
def test_queue_counts_below_their_minimum_are_one_line(tmp_path, capsys, argv, needle):
    rc = cli.main(argv + ["--out", str(tmp_path / "q")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("argv,needle", [
    (["run", "--calibration", "CAL", "--seed", "-1"], "--seed -1: a seed is an integer from 0 to 4,294,967,295"),
    (["run", "--calibration", "CAL", "--seed", str(2**64)], f"--seed {2**64}: a seed is an integer from 0"),
    (["run", "--calibration", "NEGATIVE"], "calibration.json: seed -1: a seed is an integer from 0"),
    (["calibrate", "--config", "CFG", "--pool-seed", "-1"], "--pool-seed -1: a seed is an integer from 0"),
    (["calibrate", "--config", "CFG", "--set", "seed=-1"], "config key 'seed' -1: a seed is an integer from 0"),
])
def test_a_seed_out_of_range_is_one_line_before_anything_is_written(calibrated, tmp_path, capsys, argv, needle):
    """A negative seed (numpy's generators take none) or one past torch's 2**64 - 1: before, `run --seed -1` wrote its
    log, a checkpoint and a start state, then ended in a numpy traceback; a rerun said "holds an earlier run" and
    --resume crashed again. Now one line, and no folder."""
    negative = tmp_path / "negative"
    shutil.copytree(calibrated["dir"], negative)
    rec = json.loads((negative / "calibration.json").read_text())
    (negative / "calibration.json").write_text(json.dumps({**rec, "seed": -1}))  # a calibration made before the check
    (tmp_path / "cfg.json").write_text(json.dumps({**CFG, "data_dir": str(calibrated["data"])}))
    argv = [a.replace("NEGATIVE", str(negative)).replace("CAL", str(calibrated["dir"]))
            .replace("CFG", str(tmp_path / "cfg.json")) for a in argv]
    one_line_error(capsys, cli.main(argv + ["--out", str(tmp_path / "q")]), needle)
    assert not (tmp_path / "q").exists()
    with pytest.raises(DataError, match="run seed -1: a seed"):  # the API's run, before its folder is made
        rq.run(tmp_path / "api", calibrated["dir"], rq.RunPlan(seed=-1))
    with pytest.raises(DataError, match="key 'pool_seed' -1: a seed"):
        QueueSettings.of({"pool_seed": -1})
    assert not (tmp_path / "api").exists()


def test_a_calibration_whose_config_was_edited_since_stage_a_is_refused_in_one_line(calibrated, tmp_path, capsys):
    """calibrated_config.json records the config stage A calibrated with: a fresh run (and dose) refuses an edited
    config.json by key, before its folder is made (before: a wider model ended in a size-mismatch traceback,
    another learning rate ran unsaid under a rule calibrated on this one). A moved data folder is no edit; a record
    from before the config was recorded has nothing to compare and is run, with a note saying so."""
    import argparse

    cfg = json.loads((calibrated["dir"] / "config.json").read_text())
    for key, value in (("width", 64), ("muon_lr", 0.05)):
        cal = tmp_path / f"cal_{key}"
        shutil.copytree(calibrated["dir"], cal)
        (cal / "config.json").write_text(json.dumps({**cfg, key: value}))
        said = f"config.json: {key} {value!r} (stage A calibrated with {cfg[key]!r}): edited since stage A"
        for command in ("run", "dose"):  # each starts from the calibrated state
            rc = cli.main([command, "--calibration", str(cal), "--out", str(tmp_path / "q")])
            one_line_error(capsys, rc, said, "restore it, or calibrate again into another folder")
        with pytest.raises(DataError, match=re.escape(said)):  # the API's fresh run too
            rq.run(tmp_path / "q", cal, log=lambda s: None)
        assert not (tmp_path / "q").exists()
    record = json.loads((calibrated["dir"] / "calibrated_config.json").read_text())
    assert record == {k: v for k, v in cfg.items() if k != "data_dir"}
    moved = tmp_path / "moved"
    shutil.copytree(calibrated["dir"], moved)
    (moved / "config.json").write_text(json.dumps({**cfg, "data_dir": str(tmp_path / "elsewhere")}))
    assert calibration.check_config(moved) is True
    old = tmp_path / "old"
    shutil.copytree(calibrated["dir"], old)
    (old / "calibrated_config.json").unlink()
    (old / "config.json").write_text(json.dumps({**cfg, "muon_lr": 0.05}))
    cli.check_reads(argparse.Namespace(command="run", calibration=str(old), resume=False, add_source=[]),
                    tmp_path / "q")
    assert capsys.readouterr().out.startswith(f"note: {old} predates calibrated_config.json, the record of the config")


def test_ctrl_c_on_the_queue_command_line_is_one_line_naming_how_to_go_on(calibrated, tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(rq, "run", interrupted)
    rc = cli.main(["run", "--calibration", str(calibrated["strict"]), "--out", str(tmp_path / "q")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and len(err) == 1, err
    assert err[0].startswith("interrupted: run stopped;") and err[0].endswith("the same command and --resume"), err


def test_stage_a_keeps_its_data_root_absolute_so_any_working_folder_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert calibration.load_config(None, ["data_dir=../data"]).data_dir == str(tmp_path.parent / "data")
    assert calibration.load_config(None, ["data_dir=/abs/data"]).data_dir == "/abs/data"


def test_a_stale_start_state_of_another_seed_is_not_reused(calibrated, tmp_path):
    """start_state.pt is reused only under its own key (seed, config, pool, corpus) and SHA256."""
    cfg, _, _, calib = rq.open_calibration(calibrated["strict"])
    out = tmp_path / "s"
    out.mkdir()
    state = {"trainer": {"w": torch.arange(4.0)}, "step": 3, "targets": 7}
    sha = run_folder.write_state(out / "start_state.pt", state)
    key44 = run_folder.start_state_key(cfg, calib, 44)
    (out / run_folder.START_KEY).write_text(json.dumps({"key": key44, "sha256": sha}))
    assert _equal(run_folder.cached_start_state(out, key44), state)
    assert run_folder.cached_start_state(out, run_folder.start_state_key(cfg, calib, 45)) is None  # seed 44's, not 45's
    other = dict(key44, corpus={"build_id": "0" * 64, "tokenizer_sha256": "1" * 64})
    assert run_folder.cached_start_state(out, other) is None
    (out / "start_state.pt").write_bytes((out / "start_state.pt").read_bytes()[:-10])  # torn copy
    assert run_folder.cached_start_state(out, key44) is None


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".lock"}


def test_an_unwritable_or_full_queue_folder_is_one_line_naming_it(calibrated, tmp_path, capsys, monkeypatch):
    """Issue 20: a full or read-only disk gives one line naming the path, and what was there stays as it was."""
    import errno

    import corpus.atomic

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    (tmp_path / "cfg.json").write_text("{}")  # read before the folder is made: a config that loads, on a corpus it fits
    for argv in (["run", "--calibration", str(calibrated["strict"])],
                 ["calibrate", "--config", str(tmp_path / "cfg.json"), "--set", "vocab=400",
                  f"data_dir={calibrated['data']}"]):
        rc = cli.main(argv + ["--out", str(blocker / "q")])  # a folder cannot be made inside a file
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
        assert str(blocker / "q") in err and "needs" in err, err

    out = tmp_path / "q"
    out.mkdir()
    # what was there before: an earlier dose's results (dose's default --out is the queue folder), which a run writes
    # beside; a file of the user's own is refused before anything is written (test_an_out_folder_holding_files_...)
    (out / "dose.json").write_text("{}")
    (out / "dose.md").write_text("an earlier dose's report")
    before, cal_before = _files(out), _files(calibrated["strict"])

    def full(fd):  # what a full disk answers when the written data is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus.atomic.os, "fsync", full)
    rc = cli.main(["run", "--out", str(out), "--calibration", str(calibrated["strict"])])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert str(out) in err and "free disk space" in err, err
    after = _files(out)
    assert {k: after[k] for k in before} == before and not [p for p in after if p.name.endswith(".tmp")]
    assert _files(calibrated["strict"]) == cal_before


@pytest.mark.parametrize("command, own, foreign", [
    ("calibrate", ["--sigma-shards", "--set", "--domains", "--fresh"], ["--policy", "--harm", "--resume"]),
    ("run", ["--policy", "--resume", "--add-source", "--calibration"], ["--set", "--sigma-shards", "--trials"]),
    ("dose", ["--harm", "--trials", "--calibration"], ["--policy", "--set"]),
    ("return", ["shard"], ["--policy", "--set"]),
    ("reconstruct", ["--out", "--execute", "--from-checkpoint", "--to-record", "--tolerance"],
     ["--policy", "--set", "--calibration"]),
])
def test_each_command_has_its_own_options_and_help(command, own, foreign, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0 and text.startswith("usage: ") and f" {command} " in text.splitlines()[0]
    has = lambda o: re.search(rf"(?<![\w-]){o}(?![\w-])", text)  # noqa: E731 - --harm is not --harmful-shards
    assert all(has(o) for o in own + ["--out", "--device"]) and not [o for o in foreign if has(o)]
    if command == "calibrate":  # a new user's probe: no description, and each count's help only its own name
        assert "Stage A, once per pool" in text and "Needs --config" in text
        flat = " ".join(text.split())
        for k in QueueSettings.counts():
            said = flat[flat.index(f"--{k.replace('_', '-')} {k.upper()} ") + len(k) * 2 + 4:].split(" (default")[0]
            assert said.strip() and said.strip() != k.replace("_", " "), (k, said)


# ---- re-execution: the log's numbers against what training produces now (issue 30) -----------------

def _rechained(recs):
    """The records with every prev_sha256 recomputed, as a forger would: the chain `reconstruct` checks holds."""
    out = []
    for r in recs:
        out.append(dict(r, prev_sha256=record_sha256(out[-1])) if out else dict(r))
    return out


def _write_log(folder, recs):
    (folder / "decisions.jsonl").write_text("".join(line_of(r) + "\n" for r in recs))


def _beside_its_calibration(calibrated, full_run, tmp_path, files=("decisions.jsonl",)):
    """A copy of the run folder (some files, or "all") with its calibration where the run names it."""
    run = tmp_path / full_run[0].name
    if files == "all":
        shutil.copytree(full_run[0], run)
    else:
        run.mkdir(parents=True)
        for f in files:
            shutil.copy(full_run[0] / f, run / f)
    # where the run's start record names it, relative to the run ("../NAME")
    named = json.loads((full_run[0] / "decisions.jsonl").read_text().split("\n", 1)[0])["calibration_dir"]
    shutil.copytree(calibrated["strict"], run / named)
    return run


def _first_train(recs):
    return next(r for r in recs if r["event"] == "train")


def _rolled_back_recovery(recs):
    """The first recovery record whose unrecovered domains are all its candidate's flagged ones: +0.01 on
    every domain leaves the rule's and the criterion's verdicts as they were, so the replay cannot see it."""
    for cand, rec in zip(recs, recs[1:]):
        if rec["event"] == "train" and rec["role"] == "recovery" and rec["unrecovered"] == cand["flagged"]:
            return rec
    raise AssertionError("no rolled-back recovery in the run")


def _plus_all(values, amount):
    return {d: v + amount for d, v in values.items()}


# each forgery of issue 30: (record it edits, the edit, the first field the re-execution must name)
FORGERIES = {
    "losses and deltas +0.01": (_rolled_back_recovery, lambda r: dict(r, losses=_plus_all(r["losses"], 0.01),
                                                                       deltas=_plus_all(r["deltas"], 0.01)),
                                lambda r: "deltas." + min(r["deltas"])),  # fields compared in sorted order
    "targets +1": (_first_train, lambda r: dict(r, targets=r["targets"] + 1), lambda r: "targets"),
    "history_targets +1": (_first_train, lambda r: dict(r, history_targets=r["history_targets"] + 1),
                           lambda r: "history_targets"),
    "train_loss +0.5": (_first_train, lambda r: dict(r, train_loss=r["train_loss"] + 0.5), lambda r: "train_loss"),
}


def _forged(recs, name):
    pick, edit, _ = FORGERIES[name]
    target = pick(recs)
    return _rechained([edit(r) if r["seq"] == target["seq"] else r for r in recs]), target


@pytest.fixture(scope="session")
def reexecuted(calibrated, full_run, tmp_path_factory):
    """One re-execution, of the run's log up to a rejection (a flagged shard, its recovery shard,
    the bitwise rollback) with train_loss forged and the chain recomputed: it must name that record, and
    its records serve as what training produces for every other forgery below."""
    recs = full_run[2]
    # up to the rejection after the rolled-back recovery the losses forgery edits (not always the first rejection)
    end = next(r["seq"] for r in recs if r["event"] == "reject" and r["seq"] > _rolled_back_recovery(recs)["seq"])
    forged, target = _forged(recs, "train_loss +0.5")
    run = _beside_its_calibration(calibrated, full_run, tmp_path_factory.mktemp("qforged"))
    _write_log(run, forged)
    pool = rq.open_calibration(calibrated["strict"])[2]
    calib = json.loads((calibrated["strict"] / "calibration.json").read_text())
    return reexecute(run, to_record=end, stop_early=False), end, target, (pool, calib)


def test_an_untouched_log_is_reproduced_bitwise(full_run, reexecuted):
    rx, end, _, _ = reexecuted
    recs = full_run[2][:end]
    assert rx.same_machine and rx.hashes and len(rx.made) == end
    cmp = compare_records(recs, rx.made, 0.0, True)
    assert cmp.difference is None and cmp.largest[0] == 0.0
    # the parameter SHA256s it compared: the start state's first, then at least the bitwise rollback the log
    # was cut after (whether an accept comes before it follows the trained losses, so the CPU's kernels:
    # AVX-512 machines reject the first shard)
    hashed = [r["event"] for r in recs if "params_sha256" in r]
    assert hashed[0] == "start" and "rollback" in hashed[1:] and len(hashed) >= 3


def test_a_read_only_run_folder_still_gets_the_reexecutions_verdict(full_run, reexecuted, capsys, monkeypatch):
    import errno

    from shardqueue.checks import reexecute as rx_module

    def read_only(self, folder):
        raise OSError(errno.EROFS, "Read-only file system", str(folder / "reexecution.json"))

    # the re-execution already made (of a log with a forged train_loss): its verdict is a difference
    monkeypatch.setattr(rx_module, "reexecute", lambda *a, **k: reexecuted[0])
    monkeypatch.setattr(Reexecution, "write", read_only)
    assert reexecute_folder(full_run[0]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    # that re-execution is a stretch of its log (to_record): its file is the stretch's
    assert not reexecuted[0].whole_log
    assert len(err) == 2 and "; reexecution_partial.json not written, the verdict follows" in err[0], err
    assert "needs a writable file system" in err[0] and err[1].startswith("error: re-execution of records 1-"), err


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_each_forgery_passes_the_replay_but_not_the_reexecution(full_run, reexecuted, name):
    from shardqueue.checks.replay import check_records

    rx, end, _, (pool, calib) = reexecuted
    forged, target = _forged(full_run[2], name)
    assert target["seq"] <= end
    check_records(forged, pool, calib, full_run[0])  # today's `reconstruct` accepts it (the issue's finding)
    field = FORGERIES[name][2](target)
    key = field.split(".")
    want_logged = forged[target["seq"] - 1][key[0]] if len(key) == 1 else forged[target["seq"] - 1][key[0]][key[1]]
    want_made = target[key[0]] if len(key) == 1 else target[key[0]][key[1]]
    d = compare_records(forged[:end], rx.made, 0.0, True).difference
    assert (d.seq, d.event, d.field, d.logged, d.made) == (target["seq"], "train", field, want_logged, want_made)


def test_the_reexecution_recomputes_rather_than_copies(reexecuted):
    rx, _, target, _ = reexecuted  # it ran on the log forged at target's train_loss
    d = rx.comparison.difference
    assert (d.seq, d.field, d.logged, d.made) == (target["seq"], "train_loss", target["train_loss"] + 0.5,
                                                  target["train_loss"])


def test_reconstruct_execute_names_the_first_forged_record_in_one_line(calibrated, full_run, tmp_path, capsys):
    run = _beside_its_calibration(calibrated, full_run, tmp_path, files="all")
    forged, target = _forged(full_run[2], "targets +1")
    _write_log(run, forged)
    (run / "queue_summary.json").unlink()  # the plain check would name the forgery there first (the test below)
    end = next(r["seq"] for r in forged if r["event"] == "reject")
    rc = cli.main(["reconstruct", "--execute", "--to-record", str(end), "--out", str(run)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert rc == 1 and len(err) == 1, err
    assert f"record {target['seq']} (train): targets: logged {target['targets'] + 1}, re-executed {target['targets']}" \
        in err[0]
    # a stretch (--to-record): its own file, which the main job never takes for the whole log's verdict
    part = json.loads((run / "reexecution_partial.json").read_text())
    assert part["held"] is False and part["whole_log"] is False and not (run / "reexecution.json").exists()


@pytest.mark.parametrize("damage", ["truncated", "sidecar deleted", "another state with its own sidecar"])
def test_reconstruct_checks_the_final_state_the_decay_record_names(calibrated, full_run, tmp_path, capsys, damage):
    """A new user's probe: `reconstruct` passed a run whose final.pt was cut short, which failed only when loaded.
    It checks final.pt as the checkpoints are checked (its sidecar's SHA256 and size, a plain-tensor load), and
    against the decay record (the parameters' SHA256): a file swapped in with a sidecar of its own is named too."""
    run = _beside_its_calibration(calibrated, full_run, tmp_path, files="all")
    final, decay = run / "final.pt", next(r for r in full_run[2] if r["event"] == "decay")
    assert cli.main(["reconstruct", "--out", str(run)]) == 0
    assert "; final.pt verifies and holds the parameters and scores the decay record logs" in capsys.readouterr().out
    if damage == "truncated":
        final.write_bytes(final.read_bytes()[:1000])
        needle = f"{final}: corrupt or truncated checkpoint (1000 bytes, SHA256 does not match final.json)"
    elif damage == "sidecar deleted":
        (run / "final.json").unlink()
        needle = f"{final}: no final.json beside it (incomplete write?)"
    else:
        p = load_checkpoint(final)
        model = p["trainer"]["model"]
        model[sorted(model)[0]] += 1.0  # a well-formed state, but not the one the run left
        save_checkpoint(tmp_path, 1, p, keep=0).replace(final)
        (tmp_path / "ckpt_000001.json").replace(run / "final.json")
        needle = f"{final}: its parameters are not those record {decay['seq']} (decay) logs (params_sha256 differs)"
    rc = cli.main(["reconstruct", "--out", str(run)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert rc == 1 and err == [f"error: {needle}"], err


def test_plain_reconstruct_checks_the_written_summary_and_with_it_the_logs_last_record(calibrated, full_run, tmp_path,
                                                                                        capsys):
    """A new user's probe: an edit of the log's last record (no later record chains it) and of queue_summary.json
    passed `reconstruct`, and a resume of the finished run printed the edited summary's harmful shard. The summary is
    now the one the log gives, checked field by field: so is a forgery of an earlier record, chain recomputed."""
    run = _beside_its_calibration(calibrated, full_run, tmp_path, files="all")
    assert cli.main(["reconstruct", "--out", str(run)]) == 0
    assert "; queue_summary.json is the summary they give" in capsys.readouterr().out
    summary = json.loads((run / "queue_summary.json").read_text())
    recs = read_log(run / "decisions.jsonl")
    last = dict(recs[-1], spent={**recs[-1]["spent"], "targets": 1})
    for log, written, field in ((recs[:-1] + [last], summary, "spent"),
                                (recs, {**summary, "harmful_accepted": ["h0000"]}, "harmful_accepted"),
                                (_forged(full_run[2], "targets +1")[0], summary, "accepted_records_targets")):
        _write_log(run, log)
        (run / "queue_summary.json").write_text(json.dumps(written))
        rc = cli.main(["reconstruct", "--out", str(run)])
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
        assert rc == 1 and len(err) == 1 and f"queue_summary.json: {field} is " in err[0], (field, err)
        assert err[0].endswith("or the file was written by another version of this code; if the log is to be "
                               "trusted, remove the file and `run --resume` writes it from the log")
    # the finished run resumed: the log's summary, never the edited file's
    _write_log(run, recs)
    (run / "queue_summary.json").write_text(json.dumps({**summary, "harmful_accepted": ["h0000"]}))
    with pytest.raises(DataError, match="harmful_accepted is"):
        rq.run(run, run.parent / CAL_NAME, rq.RunPlan(), resume=True, log=lambda s: None)


def test_a_stretch_that_cannot_be_is_refused_before_the_replay_prints(calibrated, full_run, tmp_path, capsys):
    """A new user's probe: `--to-record 999` and `--from-checkpoint nosuch.pt` were refused only after the replay's
    lines. Now before them, in one line each."""
    run = _beside_its_calibration(calibrated, full_run, tmp_path)
    n = len(full_run[2])
    for argv, needle in ((["--to-record", str(n + 1)], f"--to-record {n + 1}: {run / 'decisions.jsonl'} holds {n} records"),
                         (["--from-checkpoint", "nosuch.pt"], f"--from-checkpoint nosuch.pt: {run / 'nosuch.pt'} not found")):
        rc = cli.main(["reconstruct", *argv, "--out", str(run)])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and err == f"error: {needle}\n", (out, err)
    # a torn last line is no record, as the re-execution reads the log (review)
    with open(run / "decisions.jsonl", "ab") as f:
        f.write(b'{"seq": 9999, "event": "tor')
    assert cli.main(["reconstruct", "--to-record", str(n + 1), "--out", str(run)]) == 2
    assert f"--to-record {n + 1}: {run / 'decisions.jsonl'} holds {n} records" in capsys.readouterr().err
    # a damaged log is the replay's to name, as a failed check (status 1), not a usage error (review)
    lines = (run / "decisions.jsonl").read_text().splitlines(keepends=True)
    (run / "decisions.jsonl").write_text("".join(lines[:2] + ["not json\n"] + lines[2:-1]))
    assert cli.main(["reconstruct", "--to-record", "1", "--out", str(run)]) == 1


def test_reconstruct_execute_from_a_checkpoint(calibrated, full_run, tmp_path, capsys):
    run = _beside_its_calibration(calibrated, full_run, tmp_path, files="all")
    oldest = sorted(run.glob("ckpt_*.pt"))[0]
    C = torch.load(oldest, weights_only=True)["log_seq"]
    n = len(full_run[2])
    assert cli.main(["reconstruct", "--execute", "--from-checkpoint", oldest.name, "--out", str(run)]) == 0
    assert f"re-executed records {C + 1}-{n} of the log" in capsys.readouterr().out
    res = json.loads((run / "reexecution_partial.json").read_text())
    assert res["held"] and res["mode"] == "bitwise" and (res["first"], res["last"]) == (C + 1, n)
    assert res["whole_log"] is False and not (run / "reexecution.json").exists()
    for name, needle in (("final.pt", "final.pt ends the run"), ("ckpt_000000.pt", "checkpoint not found")):
        one_line_error(capsys, reexecute_folder(run, from_checkpoint=name), needle)
    # a checkpoint whose records are not the log's does not anchor it
    recs = read_log(run / "decisions.jsonl")
    _write_log(run, _rechained([dict(r, time=0.0) if r["seq"] == C else r for r in recs]))
    one_line_error(capsys, reexecute_folder(run, from_checkpoint=oldest.name), "does not anchor this log")


# runs whose final decay ran inside the queue, as the study's arms do (RunPlan.decay_updates), on the strict calibration
IN_QUEUE_DECAY = {
    # the rule on reference-curve residuals (arm B's variant); the decay begins at 700 accepted targets
    "rule": dict(budget_targets=700, decay_updates=7,
                 curves={"test_code": {"a": 0.0, "b": 0.01, "c": 0.5, "D0": 1000.0}}),
    # fixed positions (arm C): candidates 0 and 1 reach the budget (a shard holds at least 300 targets), so 2 is
    # the decay's first, flagged, and its training takes the decay's one update
    "positions": dict(policy="random", reject_rate=0.5, rejected_positions=frozenset({2}), budget_targets=600,
                      decay_updates=1),
}


@pytest.fixture(scope="session")
def decay_runs(calibrated, tmp_path_factory):
    """{name: run folder} of the IN_QUEUE_DECAY runs."""
    runs = {}
    for name, plan in IN_QUEUE_DECAY.items():
        runs[name] = tmp_path_factory.mktemp(f"qdecay_{name}")
        _run(calibrated, runs[name], **plan)
    return runs


@pytest.mark.parametrize("name", sorted(IN_QUEUE_DECAY))
def test_a_run_whose_decay_ran_inside_the_queue_is_reexecuted_bitwise(decay_runs, name, capsys):
    """The re-execution rebuilds the plan from the start record: the decay's length, the fixed positions and the
    curves included (before, it ran the decay after the queue and differed at the decay_start record)."""
    recs = read_log(decay_runs[name] / "decisions.jsonl")
    assert any(r["event"] == "decay_start" for r in recs) and recs[-2]["in_queue"]
    plan = IN_QUEUE_DECAY[name]
    assert {k: recs[0][k] for k in plan} == {k: sorted(v) if isinstance(v, frozenset) else v for k, v in plan.items()}
    assert reexecute_folder(decay_runs[name]) == 0
    assert f"re-executed records 1-{len(recs)} of the log" in capsys.readouterr().out
    res = json.loads((decay_runs[name] / "reexecution.json").read_text())
    assert res["held"] and res["mode"] == "bitwise" and res["parameter_hashes_compared"] and res["whole_log"]


def test_a_stretch_reexecuted_after_the_whole_log_leaves_its_verdict_and_the_main_job_skips_only_on_that(
        calibrated, decay_runs, tmp_path, capsys):
    """A new user's probe: after a failed whole-log check, `--to-record 10` that held overwrote reexecution.json, and
    the main job then skipped the queue as done. A stretch now has a file of its own; the main job reads the whole
    log's, and only a whole log that held is done."""
    run = _beside_its_calibration(calibrated, (decay_runs["rule"],), tmp_path, files="all")
    assert reexecute_folder(run) == 0
    whole = json.loads((run / "reexecution.json").read_text())
    assert reexecute_folder(run, to_record=3) == 0
    assert "; a stretch, not the whole log: reexecution_partial.json" in capsys.readouterr().out
    assert json.loads((run / "reexecution.json").read_text()) == whole  # the whole log's verdict, as it was
    assert json.loads((run / "reexecution_partial.json").read_text())["last"] == 3
    assert main_job._held(run / "reexecution.json")
    for held, whole_log in ((False, True), (True, False), (True, None)):  # failed; a stretch; an older file
        (run / "reexecution.json").write_text(json.dumps({**whole, "held": held, "whole_log": whole_log}))
        assert not main_job._held(run / "reexecution.json"), (held, whole_log)
    # a file written before whole_log was kept: it loads (the findings page reads it), and the main job runs it again
    (run / "reexecution.json").write_text(json.dumps({k: v for k, v in whole.items() if k != "whole_log"}))
    old = Reexecution.load(run)
    assert old.held and old.whole_log is None and not main_job._held(run / "reexecution.json")


def test_reconstruct_execute_from_a_checkpoint_inside_the_in_queue_decay(decay_runs, capsys):
    """A stretch that starts after decay_start continues the decay (before, it began a second one)."""
    run = decay_runs["rule"]
    recs = read_log(run / "decisions.jsonl")
    begun = next(r["seq"] for r in recs if r["event"] == "decay_start")
    seqs = [torch.load(p, weights_only=True)["log_seq"] for p in sorted(run.glob("ckpt_*.pt"))]
    C = next(c for c in seqs if begun < c < len(recs))
    assert reexecute_folder(run, from_checkpoint=f"ckpt_{C:06d}.pt") == 0
    assert f"re-executed records {C + 1}-{len(recs)} of the log" in capsys.readouterr().out


def test_a_flagged_candidate_that_took_the_decays_last_update_is_undecided_not_judged_on_no_training(decay_runs):
    """Its recovery shard would train 0 updates and leave the model as the candidate did: every flagged domain
    still risen, the shard rejected on no measurement. It is rolled back undecided, and the decay goes on."""
    recs = read_log(decay_runs["positions"] / "decisions.jsonl")
    i = next(i for i, r in enumerate(recs) if r["event"] == "train" and r.get("position") == 2)
    assert recs[i]["phase"] == "decay" and recs[i]["flagged"] == ["random"] and recs[i]["updates"] == 1
    assert [r["event"] for r in recs[i + 1: i + 3]] == ["rollback", "undecided"]
    assert recs[i + 2]["note"] == "no decay update left to test recovery with"
    assert recs[i + 2]["queue"]["undecided"] == [recs[i]["shard"]] and not recs[i + 2]["queue"]["rejections"]
    assert all(r["updates"] >= 1 for r in recs if r["event"] == "train")
    assert recs[-2]["event"] == "decay" and recs[-2]["updates"] == 1  # the next candidate, accepted, decays
    assert reconstruct_folder(decay_runs["positions"], out=lambda s: None) == 0


def test_a_log_whose_start_record_does_not_size_its_in_queue_decay_is_refused_in_one_line(decay_runs, tmp_path,
                                                                                           capsys):
    recs = read_log(decay_runs["positions"] / "decisions.jsonl")
    start = {k: v for k, v in recs[0].items() if k != "decay_updates"}  # as a version before it was recorded
    _write_log(tmp_path, _rechained([start] + recs[1:]))
    begun = next(r["seq"] for r in recs if r["event"] == "decay_start")
    one_line_error(capsys, reexecute_folder(tmp_path), f"record {begun} (decay_start)", "decay_updates")


def test_a_stable_phase_an_observer_ended_is_taken_from_the_log_and_said_in_one_line(calibrated, tmp_path, capsys):
    """Arm A ends its stable phase once its reference curve covers (study/arms.py): a decision on its reference
    branches, which the log does not hold. The decay_start record names it, and the re-execution takes it from
    there, saying so, rather than training past it and differing."""
    from shardqueue.study.arms import ReferenceBranches

    branches = ReferenceBranches([300, 600], 300, cover_below=1e9)  # covered at its first branch, ended past 300
    _run(calibrated, tmp_path / "a", policy="plain", budget_targets=10 ** 6, decay_updates=2, observers=[branches])
    recs = read_log(tmp_path / "a" / "decisions.jsonl")
    begun = next(r for r in recs if r["event"] == "decay_start")
    assert branches.stopped and begun["stable_ended_by"].startswith("arm A's reference branches")
    assert reexecute_folder(tmp_path / "a") == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith(f"note: record {begun['seq']} (decay_start): where the stable "
                                                   f"phase ended is taken from the log")
    assert notes[0][len("note: "):] in json.loads((tmp_path / "a" / "reexecution.json").read_text())["mode"]
    # continued inside the decay, where the observer's end is not in the checkpoint: the decay goes on, no candidate
    # of the stable phase trains
    C = max(c for c in (torch.load(p, weights_only=True)["log_seq"] for p in (tmp_path / "a").glob("ckpt_*.pt"))
            if c < len(recs))
    assert C >= begun["seq"] and reexecute_folder(tmp_path / "a", from_checkpoint=f"ckpt_{C:06d}.pt") == 0


EDITS = {"micro_rows": 2, "eval_rows": 8, "muon_lr": 0.03}  # CFG's are 4, 4 and 0.02


def test_resume_and_reconstruct_refuse_an_edited_calibration_config_naming_each_key(calibrated, full_run, tmp_path,
                                                                                    capsys):
    run = _beside_its_calibration(calibrated, full_run, tmp_path, files="all")
    (run / "queue_summary.json").unlink()
    cal = tmp_path / CAL_NAME
    c = json.loads((cal / "config.json").read_text())
    assert all(c[k] == CFG[k] != v for k, v in EDITS.items())
    (cal / "config.json").write_text(json.dumps({**c, **EDITS}))
    before = (run / "decisions.jsonl").read_bytes()
    with pytest.raises(DataError) as e:
        rq.run(run, cal, resume=True, log=lambda s: None, report=False)
    for k, v in EDITS.items():
        assert f"config.json {k} ({CFG[k]!r} when the run started, {v!r} now)" in str(e.value)
    assert (run / "decisions.jsonl").read_bytes() == before
    assert reconstruct_folder(run, out=lambda s: None) == 1
    err = capsys.readouterr().err
    assert all(f"config.json {k}" in err for k in EDITS), err


def test_a_start_record_with_a_rate_under_another_policy_still_rebuilds_its_plan(tmp_path):
    """Runs recorded a --reject-rate under policy queue before the command line refused it (review): their plan is
    rebuilt as recorded, so they resume and re-execute."""
    start = {"policy": "queue", "seed": 3, "reject_rate": 0.5, "budget_targets": 600, "rotation_shards": 6,
             "branch_check": True}
    plan = rq.RunPlan.from_record(start)
    assert (plan.policy, plan.reject_rate) == ("queue", 0.5) and plan.recorded()["reject_rate"] == 0.5
    with pytest.raises(DataError, match="reject rate 0.5: a reject rate is policy random's"):
        plan.check_new()  # what a new run's start checks (the command line's and the library's run())
    with pytest.raises(DataError, match="policy queue takes none"):
        rq.run(tmp_path / "q", tmp_path / "no-calibration", rq.RunPlan(policy="queue", reject_rate=0.5))
    assert not (tmp_path / "q").exists()
