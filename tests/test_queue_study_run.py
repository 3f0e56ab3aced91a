"""One real queue study at a micro setting (two seeds, three arms, a handful of shards), checked
against what its parts compute: the reference curve, efficiency points, the verdict, equal
budgets, the in-queue decay on each arm's own accepted shards, the damaged pool."""
import json
import re
import os

import pytest
from conftest import MICRO_STUDY as MICRO
from conftest import ROOT
from conftest import run_micro_study as study

from shardqueue.study import presets
from shardqueue.study.power import seeds_to_use
from shardqueue.study.report import seed_lines, verdict_lines
from shardqueue.study.run import power_lines

# summary.json of the micro study as the code before issue 54's move wrote it (tests/test_queue_reference.py
# says when to write it again: PACKAUDIT_WRITE_REFERENCE=1)
STUDY_REFERENCE = ROOT / "tests" / "reference" / "micro_study"

@pytest.fixture(scope="module")
def micro(micro_study):
    with pytest.MonkeyPatch.context() as mp:  # the tests that run the study again run it at this preset
        mp.setitem(presets.PRESETS, "micro", MICRO)
        yield micro_study


def test_the_summary_is_what_its_parts_compute(micro):
    from shardqueue.study.adoption import VERDICTS, adoption
    from shardqueue.study.efficiency import efficiency_points
    from shardqueue.study.reference_curve import curve_from_seeds

    s = micro["summary"]
    rc = s["reference_curve"]
    assert (rc["D"], rc["L"]) == curve_from_seeds(rc["per_seed"])
    assert all(b >= a for a, b in zip(rc["L"][1:], rc["L"][:-1]))  # non-increasing in D
    points = {"A": {}, "B": {}, "C": {}}
    for r in s["runs"]:
        # every run is measured on the curve of arm A's *other* seed (two seeds: that seed's points alone)
        other = next(k for k in rc["per_seed"] if k != str(r["seed"]))
        cD, cL = curve_from_seeds({other: rc["per_seed"][other]})
        e = efficiency_points(cD, cL, r["trained_targets"], r["final_selection"]["mean"])
        assert e["points"] == r["efficiency"]["points"]
        points[r["arm"]][r["seed"]] = e["points"]
    ad = adoption(points)
    assert ad["verdict"] == s["adoption"]["verdict"] and ad["verdict"] in VERDICTS
    assert ad["threshold"] == s["adoption"]["threshold"]
    if ad["measured"]:  # arm A is measured on the other seed's curve, not its own: its points are not zero
        assert all(v != 0 for v in points["A"].values()) and ad["per_arm_spread"]["A"]["mean_pairwise"] > 0
        assert set(s["adoption"]["intervals"]) == {"B-A", "B-C"}
    assert {f"{r['arm']}_s{r['seed']}" for r in s["runs"]} == {f"{a}_s{d}" for a in "ABC" for d in (43, 44)}
    assert set(s["per_axis"]["gaps_bpb"]) == {r["name"] for r in s["runs"]}  # every run, refused or not
    # the span rule: arm A's curve reaches below every B and C final loss, or A ran to its cap
    lowest = min(r["final_selection"]["mean"] for r in s["runs"] if r["arm"] != "A")
    for sd, c in rc["per_seed"].items():
        assert min(c["L"][:-1]) <= lowest or c["stopped_covered"] is False
    report = (micro["out"] / "report.md").read_text()
    assert f"## Verdict: {s['adoption']['verdict']}" in report and "None" not in report
    # the figure's dashed curve pools every seed; the caption does not call it the curve the runs are measured on
    assert "the monotone fit of every seed's points pooled (dashed)" in report \
        and "the fitted reference curve" not in report
    # the plan counts the model the runs trained: a run's saved parameters, counted
    from training.checkpoint import load_checkpoint

    saved = load_checkpoint(micro["out"] / "A_s43" / "final.pt")["trainer"]["model"]
    assert s["plan"]["parameters"] == sum(t.numel() for t in saved.values())
    assert report.index("## Definitions") < report.index("## Verdict") < report.index("## Seeds: planned and used")
    assert s["efficiency_definition"] in report and s["axis_definition"] in report
    assert s["adoption"]["rule"] in report
    same = [sd for sd in (43, 44) if next(r for r in s["runs"] if r["name"] == f"B_s{sd}")["final_selection"]
            == next(r for r in s["runs"] if r["name"] == f"C_s{sd}")["final_selection"]]
    says = "B - C there is zero by construction, not a measured tie, and says nothing about choosing shards" in report
    assert says == bool(same) and (not same or f"{', '.join(map(str, same))} arm C ended with exactly B's" in report)


def test_arm_c_rejects_as_often_as_b_and_compute_is_given_per_arm(micro):
    s = micro["summary"]
    for seed, c in s["arm_c"].items():
        b = next(r for r in s["runs"] if r["name"] == f"B_s{seed}")
        x = next(r for r in s["runs"] if r["name"] == f"C_s{seed}")
        assert c["B"]["rejections"] == b["decisions"]["reject"] and c["C"]["rejections"] == x["decisions"]["reject"]
        assert c["equal"] == (c["B"]["rejections"] == c["C"]["rejections"]) and (c["equal"] or c["why_not"])
        assert len(c["positions"]) == c["B"]["rejections"] and all(p < c["window"] for p in c["positions"])
    comp = s["compute"]
    assert set(comp["per_arm"]) == {"A", "B", "C"} and all(v["seeds"] == 2 for v in comp["per_arm"].values())
    a, b = comp["per_arm"]["A"], comp["per_arm"]["B"]
    # arm A to its budget: the mean of its runs' D (stable phase and the decay branch at the budget)
    assert a["trained_targets"] == sum(r["trained_targets"] for r in s["runs"] if r["arm"] == "A") / 2
    assert comp["b_over_a"]["trained_targets"] == b["trained_targets"] / a["trained_targets"] >= 1
    assert comp["b_over_a"]["wall_s"] == b["wall_s"] / a["wall_s"]
    sd = s["seeds"]
    assert sd["used"] == 2 and sd["list"] == [43, 44] and sd["preset_max"] == 0
    assert sd["planned"] == s["power"]["seeds_needed"]
    if s["power"]["sigma_diff_points"] is not None:  # 2 t(1 df) sigma / sqrt(2) at the two seeds used
        assert sd["expected_width_points"] == pytest.approx(2 * 12.7062 * s["power"]["sigma_diff_points"] / 2 ** 0.5,
                                                            rel=1e-4)
    report = (micro["out"] / "report.md").read_text()
    assert "**Compute per arm**" in report and "Overhead of B over A" in report and "Arm C's rejections" in report
    # seconds to a tenth (whole seconds at this scale read 2 and 7 for a ratio of 2.80x), and arm A's row said to run
    # past the budget (its kept updates outnumbered those of the same shards in an arm C without a rejection)
    c = s["answers"]["compute"]["A_s43"]
    row = (f"| A_s43 | {c['kept_updates']} | {c['wasted_updates']} | {c['screens']} | {c['train_kept_s']:.1f} | "
           f"{c['train_wasted_s']:.1f} | {c['measure_screen_other_s']:.1f} | {c['reference_branches_s']:.1f} |")
    assert row in report
    assert "Arm A's rows are its whole run: its stable shards past the budget" in report


def test_d_counts_targets_after_the_shared_start_and_budgets_are_equal(micro):
    s = micro["summary"]
    bc = s["budget_check"]
    assert bc["held"] and "equal" not in bc and len(set(bc["decay_updates"].values())) == 1
    for r in s["runs"]:
        # D = stable phase + decay, never the shared stage-A training
        assert r["trained_targets"] == bc["stable"][r["name"]] + bc["decay"][r["name"]]
        assert abs(bc["stable"][r["name"]] - bc["budget_targets"]) < 1.5 * MICRO.shard_targets


def test_each_arm_decays_on_shards_its_own_policy_accepted(micro):
    from shardqueue.engine.log import read_log

    out = micro["out"]
    pool = json.loads((out / "stage_a" / "pool.json").read_text())
    U = presets.decay_updates(MICRO, 4 * 32)
    for r in micro["summary"]["runs"]:
        assert r["decay"]["updates"] == U and r["decay"]["shards"]
        assert not set(r["decay"]["shards"]) & set(pool["decay"])  # never the reserved, unjudged shards
        recs = read_log(out / r["name"] / "decisions.jsonl", log=lambda x: None)
        accepted = recs[-1]["queue"]["accepted"]
        if r["arm"] != "A":
            assert set(r["decay"]["shards"]) <= set(accepted)
        else:  # A's branch at the budget decays on the next shards of its own plain order
            run = json.loads((out / r["name"] / "study_run.json").read_text())
            b = next(b for b in run["branches"] if b["decay_shards"] == r["decay"]["shards"])
            k = len(b["accepted"])
            assert accepted[:k] == b["accepted"] and accepted[k:k + len(b["decay_shards"])] == b["decay_shards"]


def test_the_pool_holds_damaged_shards_that_rebuild(micro):
    from shardqueue import api as rq

    cfg, world, pool, calib = rq.open_calibration(micro["out"] / "stage_a")  # rebuilds and checks the copies
    dmg = pool["damage"]["shards"]
    assert sorted(d["kind"] for d in dmg) == ["boilerplate", "line_shuffle", "mojibake", "truncate"]
    shards = {s["id"]: s for s in pool["shards"]}
    for d in dmg:
        assert 0 < d["share"] <= 1 and shards[d["id"]]["sources"].get(d["kind"]) == len(d["damaged"])
        assert d["id"] in pool["order"]
    assert calib["rate_kind"] == "held-out" and calib["held_out_on_branch"]
    # sub-shard checkpoints: the last sigma state, then 2 states per held-out shard (3 + 1 shards)
    assert len(calib["states"]) == MICRO.sigma_shards + 1 + 2 * (MICRO.held_out_shards + 1)
    assert calib["transitions"] == 2 * 4 + 1 - (MICRO.choose_transitions + 1) - 2
    assert micro["summary"]["calibration"]["false_rejection"]["rate kind"] == "held-out"


def test_unequal_budgets_are_refused_in_one_line(micro, tmp_path, capsys):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(micro["out"], out)
    f = out / "C_s44" / "study_run.json"
    run = json.loads(f.read_text())
    run["accounting"]["trained_targets"] += 4 * MICRO.shard_targets  # as if C trained four more shards
    f.write_text(json.dumps(run))
    mp = pytest.MonkeyPatch()
    mp.setitem(presets.PRESETS, "micro", MICRO)
    try:
        assert study(out, micro["data"]) == 2
    finally:
        mp.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the arms did not train equal budgets: C_s44:")
    # how far past the budget, and what to do: a rerun in the same folder would read the same runs back
    assert re.search(r"C_s44: [\d,]+ stable-phase targets for a budget of [\d,]+ \([\d,]+ past it, the largest "
                     r"candidate shard [\d,]+\)", err[0]), err
    assert err[0].endswith(f"no report written: train the runs again in another --out (--calibration "
                           f"{out / 'stage_a'} keeps stage A)"), err


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".lock"}


def test_an_unwritable_or_full_study_folder_is_one_line_and_changes_nothing(micro, tmp_path, capsys, monkeypatch):
    """Issue 20: a full or read-only disk gives one line naming the path; a finished study stays as it was."""
    import errno
    import shutil

    import corpus.atomic

    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc = study(blocker / "study", micro["data"])  # a folder cannot be made inside a file
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert str(blocker / "study") in err and "needs" in err, err

    out = tmp_path / "copy"
    shutil.copytree(micro["out"], out)
    before = _files(out)

    def full(fd):  # what a full disk answers when the written data is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus.atomic.os, "fsync", full)
    rc = study(out, micro["data"])  # every arm is done: only the summary and report are written again
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert str(out) in err and "free disk space" in err, err
    assert _files(out) == before  # no file changed, none half-written, no temporary file left


def test_an_interrupted_arm_is_redone_and_its_earlier_files_are_named_in_the_report(micro, tmp_path, monkeypatch):
    """Issue 20, leftovers: the files an interrupted arm left are moved aside when it restarts, and the report
    names the folder they were moved to."""
    import shutil

    from shardqueue.study import report as study_report

    assert micro["summary"]["earlier_attempts"] == []
    assert "## Earlier attempts kept aside\n\nFiles" in (micro["out"] / "report.md").read_text()
    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    for name in ("selection_figure", "control_figure", "screen_figure", "compute_figure"):
        # not drawn again: this test reads report.md and summary.json (the four figures took 0.6 s of CPU)
        monkeypatch.setattr(study_report, name, lambda summary, path: None)
    out = tmp_path / "copy"
    shutil.copytree(micro["out"], out)
    (out / "C_s43" / "study_run.json").unlink()  # as if killed after training, before its record was written
    assert study(out, micro["data"]) == 0
    kept = list((out / "C_s43" / "previous").iterdir())
    assert len(kept) == 1 and (kept[0] / "decisions.jsonl").exists()  # the killed attempt's log, kept aside
    n = sum(1 for f in kept[0].rglob("*") if f.is_file())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["earlier_attempts"] == [{"folder": f"C_s43/previous/{kept[0].name}", "files": n}]
    assert f"- `C_s43/previous/{kept[0].name}/` ({n} files)" in (out / "report.md").read_text()


def test_a_finished_run_made_under_another_plan_is_refused_not_reported_as_this_studys(micro, tmp_path, monkeypatch,
                                                                                         capsys):
    """A rerun on the same --out with --curve added, where the first run used the basic rule: arm B's finished runs
    were read back and reported as the curve variant's. Now: one line naming the run and what differs, and nothing
    trained or moved. The micro setting's stage A fits no identifiable curve, so its fits are taken as good here."""
    import shutil

    from shardqueue.study import run as study_run

    def identifiable(*args):
        curves, D = real(*args)
        return {d: {**c, "ok": True, **{k: c.get(k, 1.0) for k in ("a", "b", "c", "D0")}} for d, c in curves.items()}, D

    real = study_run.stage_a_curves
    monkeypatch.setattr(study_run, "stage_a_curves", identifiable)
    out = tmp_path / "copy"
    shutil.copytree(micro["out"], out)
    before = _files(out)
    assert study(out, micro["data"], curve=True) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {out / 'B_s43'}: this run finished under another run plan: curves; this --out "
                          "holds a study made with other settings: rerun it with those, or give another --out"), err
    assert _files(out) == before


def test_a_finished_run_whose_log_was_edited_is_refused_naming_the_run_and_record(micro, tmp_path, capsys):
    """A new user's probe: one target count in B_s44's log changed by hand, and the study rebuilt from the finished
    runs took it (exit 0, arm B's compute changed). Its log's chain is checked before it is used: one line naming
    the log and the record that no longer chains, nothing trained, moved or written."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(micro["out"], out)
    log = out / "B_s44" / "decisions.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    n = next(i for i, ln in enumerate(lines) if '"targets": ' in ln and json.loads(ln)["event"] == "train")
    rec = json.loads(lines[n])
    lines[n] = lines[n].replace(f'"targets": {rec["targets"]}', f'"targets": {rec["targets"] - 1}')
    log.write_text("".join(lines))
    before = _files(out)
    assert study(out, micro["data"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {log}: record {n + 2} does not chain to record {n + 1} "), err
    assert err.endswith(f"this study reuses a finished run only as it ran: restore the log, or remove {out / 'B_s44'} "
                        "to run the arm again\n"), err
    assert _files(out) == before


def test_a_measured_verdict_renders_its_intervals_and_spreads_in_the_report_and_on_the_findings_page(micro, tmp_path):
    """The micro study's seeds may leave points refused; the report and the findings page are checked on its summary
    with the committed small study's points put in (their intervals are worked by hand in test_queue_study)."""
    import shutil

    from findings.summary import study_section
    from shardqueue.study.adoption import UNRESOLVED, adoption
    from shardqueue.study.report import render

    s = json.loads(json.dumps(micro["summary"]))
    ad = adoption({"A": {43: 0.0, 44: 0.0}, "B": {43: 60.98, 44: 42.69}, "C": {43: 48.97, 44: -20.08}})
    s["adoption"] = {**ad, "b_minus_a": {str(k): v for k, v in ad["b_minus_a"].items()},
                     "b_minus_c": {str(k): v for k, v in ad["b_minus_c"].items()}}
    md = render(s)
    assert f"## Verdict: {UNRESOLVED}" in md
    assert "| B-A | 2 | +51.83 | 12.93 | 12.706 | [-64.36, +168.03] | contains | contains |" in md
    assert "| C | 69.05 | 69.05 |" in md and "Seed spread 69.05 (arm C)" in md
    (tmp_path / "queue_study").mkdir()
    (tmp_path / "queue_study" / "summary.json").write_text(json.dumps(s))
    shutil.copy(micro["out"] / "report.md", tmp_path / "queue_study" / "report.md")
    sec = study_section(tmp_path / "queue_study", tmp_path)
    assert sec.headline.startswith(f"Verdict: {UNRESOLVED} (B-A: mean +51.83, 95% interval [-64.36, +168.03]")
    assert ("B − A, mean over seeds with its 95% t interval (1 df)", "+51.83 [-64.36, +168.03]",
            "above the threshold to adopt; at or below it: not adopted; else unresolved") in sec.rows
    if s["per_axis"]["defined"]:  # the per-axis gaps' interval, shown whether or not points were refused
        g = s["per_axis"]["intervals_bpb"]["B-A"]
        assert ("B − A, gap to the reference curve (BPB), mean and 95% t interval (1 df)",
                f"{g['mean']:+.4f} [{g['low']:+.4f}, {g['high']:+.4f}]", "no result measured") in sec.rows


@pytest.mark.parametrize("beta, needed, reason, said", [
    # stage A's loss does not fall: no slope, so no count
    (None, None, "the control loss does not fall over stage A (slope +0.0100 BPB per unit ln D)",
     "; no slope to convert it to efficiency points (the control loss does not fall over stage A (slope +0.0100 BPB "
     "per unit ln D))"),
    # a slope, but more seeds than the search counts
    (-0.2, None, "more than 1,000,000,000 seeds",
     " = 21.32 efficiency points at stage A's slope -0.2000 BPB per unit ln D; a 95% interval of B-A narrower than "
     "the floor 0.6 points needs no count seeds per arm (more than 1,000,000,000 seeds)"),
    # a count above the preset's cap
    (-0.2, 46, "", " = 21.32 efficiency points at stage A's slope -0.2000 BPB per unit ln D; a 95% interval of B-A "
                   "narrower than the floor 0.6 points needs 46 seeds per arm"),
])
def test_a_planned_study_without_a_usable_count_runs_the_presets_most_seeds_and_says_why(beta, needed, reason, said):
    # the "planned" preset: seeds (43, 44), at most 10; sigma_run 0.03 BPB, B-A at one seed 0.03 sqrt 2 = 0.0424 BPB,
    # at beta -0.2: 0.042426 / (0.2 ln 1.01) = 21.32 points (written here, not taken from the plan's code)
    p = presets.PRESETS["planned"]
    assert (p.seeds, p.max_seeds) == ((43, 44), 10)
    power = {"sigma_run_bpb": 0.03, "sigma_diff_bpb": 0.0424264, "beta": beta, "floor": 0.6, "level": 0.95,
             "points_per_bpb": None if beta is None else 248.75, "sigma_diff_points": None if beta is None else 21.3193,
             "seeds_needed": needed, "reason": reason}
    seeds = seeds_to_use(needed, p.seeds, p.max_seeds)
    assert seeds == (43, 44, 45, 46, 47, 48, 49, 50, 51, 52)
    used = ("the preset's most: stage A gave no count" if needed is None else
            "the planned count capped at the preset's 10")
    assert power_lines(power, seeds, p) == ("seed plan from stage A: sigma_run 0.0300 BPB (mean sigma_d), B-A at one "
                                            "seed 0.0424 BPB" + said + "\n  used: 10 seeds per arm (43-52), " + used)
    s = {"power": power, "seeds": {"used": 10, "list": list(seeds), "planned": needed, "preset_max": 10,
                                   "from_measured_spread": None, "expected_width_points": None}}
    text = seed_lines(s)[3]
    assert ("Used: 10 seeds per arm (43-52): the preset's most, since stage A gave no count." if needed is None else
            "Used: 10 seeds per arm (43-52): the planned count, capped at the preset's 10 (CPU time).") in text
    assert (f"({reason})" in text) if reason else "asks for 46 seeds per arm" in text
    lead = "With no count planned, nothing says these seeds suffice" if needed is None else "The study ran fewer seeds than planned"
    assert text.endswith(lead + ": its intervals may be wider than the floor, so it can resolve a gain only well away "
                         "from 0 and the threshold; a gain near them stays unresolved.")


# what the clock, the machine and the folder decide: provenance, the timing block, a ratio of wall times, the
# stage-A folder's path (and every wall time: a key ending in _s)
NOT_COMPARED = ("provenance", "timing", "seconds", "overhead_vs_kept_training", "folder")


def comparable(value, out):
    """A study summary without what NOT_COMPARED names, the run folder's path replaced by a name."""
    if isinstance(value, dict):
        return {k: comparable(v, out) for k, v in value.items() if k not in NOT_COMPARED and not k.endswith("_s")}
    if isinstance(value, list):
        return [comparable(v, out) for v in value]
    return value.replace(str(out), "<out>") if isinstance(value, str) else value


def test_the_micro_study_summary_equals_the_reference_value_for_value(micro):
    from records.provenance import machine

    got, here = comparable(micro["summary"], micro["out"]), machine("cpu")
    if os.environ.get("PACKAUDIT_WRITE_REFERENCE") == "1":
        STUDY_REFERENCE.mkdir(parents=True, exist_ok=True)
        (STUDY_REFERENCE / "summary.json").write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        (STUDY_REFERENCE / "machine.json").write_text(json.dumps(here, indent=1, sort_keys=True) + "\n")
    made_on = json.loads((STUDY_REFERENCE / "machine.json").read_text())
    if made_on != here:
        pytest.skip(f"the reference was made on {made_on}; floats agree bitwise only there (this is {here})")
    want = json.loads((STUDY_REFERENCE / "summary.json").read_text())
    assert comparable(want, micro["out"]) == want and "compute" in want  # the reference holds no wall time
    assert got == want


def test_ctrl_c_during_the_study_is_one_line_saying_how_to_go_on(small_corpus, tmp_path, capsys, monkeypatch):
    import shardqueue.study.run as study_run

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    monkeypatch.setattr(study_run, "_run", interrupted)
    assert study(tmp_path / "s", small_corpus) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted: the study stopped;") and "rerun the same command" in err[0]


def test_stage_a_time_is_kept_when_stage_a_ends_not_when_the_study_does(small_corpus, tmp_path, monkeypatch):
    """Interrupted right after stage A, a study finished by a later invocation must report stage A's own time, not
    the few seconds that invocation took to open it: the time is written as stage A ends."""
    import shardqueue.study.run as study_run

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    monkeypatch.setattr(study_run, "stage_a_curves", interrupted)  # the first thing after stage A
    assert study(tmp_path / "s", small_corpus) == 130
    assert (tmp_path / "s" / "stage_a" / "calibration.json").exists()
    assert json.loads((tmp_path / "s" / "stage_a_seconds.json").read_text())["seconds"] > 0


def test_a_budget_check_that_holds_says_how_far_apart_the_arms_trained_never_equal():
    # the probe's seed 44: A 9,437, B 11,542 and C 9,437 stable-phase targets for a budget of 9,260 (one shard of
    # overshoot allowed): (11,542 - 9,437) / 9,437 = 22 % apart
    from shardqueue.study.report import budget_held

    bc = {"stable": {"A_s44": 9437, "B_s44": 11542, "C_s44": 9437}, "budget_targets": 9260}
    said = budget_held(bc, 3)
    assert said == ("holds in all 3 runs, within a shard of the budget of 9,260 targets; not equal: their stable "
                    "phases trained 9,437 to 11,542 targets (22% apart).")
    assert "equal across" not in said


def test_a_stage_a_of_another_setting_is_refused_naming_what_differs(micro):
    """--calibration names a stage A; the arms train its model and shards. One made with another model, shard size
    or source would be reported under this preset's setting (a new user's probe ran a depth-1 stage A as 'tiny')."""
    from dataclasses import replace

    from errors import DataError
    from shardqueue import api as rq
    from shardqueue.study.run import check_setting

    cal = micro["out"] / "stage_a"
    cfg, calib = json.loads((cal / "config.json").read_text()), rq.check_calibrated(cal)
    check_setting(cal, MICRO, cfg, calib)  # its own: accepted
    for other, needle in ((replace(MICRO, shard_targets=512), "shard_tokens 256 (the preset's 512)"),
                          (replace(MICRO, source="parquet"), "source stdlib (the preset's parquet)"),
                          (replace(MICRO, micro_rows=8), "micro_rows 4 (the preset's 8)"),
                          (MICRO.with_vocab(300), "vocab 400 (the preset's 300)")):
        with pytest.raises(DataError, match=re.escape(needle) + ".*leave --calibration out"):
            check_setting(cal, other, cfg, calib)
    # the study folder's own stage A, made by an earlier run of another setting: moved aside, not --calibration
    with pytest.raises(DataError, match="move it aside \\(or give another --out\\) to calibrate again"):
        check_setting(cal, MICRO.with_vocab(300), cfg, calib, given=False)
    # a rerun with --domains (or without the --domains stage A was made with) used stage A's domains silently
    with pytest.raises(DataError, match=re.escape("(domains built-in (this command's from a file: x y)); give the "
                                                  "--domains it was made with, or move it aside")):
        check_setting(cal, MICRO, cfg, calib, given=False, domains={"control": {"x": {}}, "selection": {"y": {}}})


def test_a_study_refused_for_its_stage_a_leaves_no_file_of_its_own(micro, tmp_path, monkeypatch, capsys):
    """A new user's probe: the refusal of a --calibration of another setting left OUT/provenance.json behind."""
    import argparse
    from dataclasses import replace

    from shardqueue.study.run import run_study

    monkeypatch.setitem(presets.PRESETS, "micro", replace(MICRO, micro_rows=8))
    args = argparse.Namespace(preset="micro", out=str(tmp_path / "s"), data_dir=str(micro["data"]), dry_run=False,
                              curve=False, calibration=str(micro["out"] / "stage_a"), device="cpu", workers=1,
                              engine="local", ray_address=None)
    assert run_study(args, log=lambda s: None) == 2
    assert "a stage A of another setting (micro_rows 4 (the preset's 8))" in capsys.readouterr().err
    left = sorted(p.name for p in (tmp_path / "s").iterdir()) if (tmp_path / "s").exists() else []
    assert left == [], left


def test_a_study_out_folder_holding_files_the_study_did_not_write_is_refused_untouched(micro, tmp_path, capsys):
    """Before, the study wrote its report.md and summary.json over a user's. Its own earlier output (a finished study,
    rerun to rebuild its report) is its own; a name of its own without the study's output beside it, or a file of
    the user's inside stage A's folder, which stage A would write beside, is refused in one line."""
    import shutil

    from conftest import one_line_error, queue_script
    from shardqueue.out_folder import STUDY, foreign_entries

    assert foreign_entries(micro["out"], (STUDY,)) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("MY OWN REPORT\n")
    (mine / "summary.json").write_text("{}\n")
    rc = queue_script("study").main(["--preset", "micro", "--out", str(mine), "--data-dir", str(micro["data"])])
    one_line_error(capsys, rc, f"--out {mine}: holds report.md, summary.json, not an earlier study's output")
    assert (mine / "report.md").read_text() == "MY OWN REPORT\n" and sorted(os.listdir(mine)) == ["report.md",
                                                                                                "summary.json"]
    copy = tmp_path / "copy"
    shutil.copytree(micro["out"], copy)
    (copy / "stage_a" / "notes.txt").write_text("mine\n")
    (copy / "B_s43" / "notes.txt").write_text("mine\n")
    assert foreign_entries(copy, (STUDY,)) == ["B_s43/notes.txt", "stage_a/notes.txt"]


def test_a_study_on_a_data_root_with_no_prepared_corpus_is_one_line_and_makes_no_folder(tmp_path, capsys,
                                                                                       monkeypatch):
    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    assert study(tmp_path / "s", tmp_path / "no-data") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corpus not prepared" in err[0] and str(tmp_path / "no-data") in err[0], err
    assert not (tmp_path / "s").exists()  # no folder holding only provenance.json
    # a --domains file that is not there: one line before anything is made (it left provenance.json alone there)
    import argparse

    from shardqueue.study.run import run_study

    assert run_study(argparse.Namespace(preset="micro", out=str(tmp_path / "s"), data_dir=str(tmp_path / "no-data"),
                                        domains=str(tmp_path / "d.json"), device="cpu")) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'd.json'}: domains file not found\n"
    assert not (tmp_path / "s").exists()


def test_the_prepare_command_a_missing_corpus_suggests_names_the_data_root_it_was_looked_for_in(tmp_path, capsys,
                                                                                             monkeypatch):
    """The suggested command prepares the corpus where the study looks: with the --data-dir given (and the input a
    parquet corpus needs); on the default data root, where prepare.py writes anyway, without it."""
    from dataclasses import replace

    from corpus.layout import ENV_VAR, Layout
    from errors import DataError

    monkeypatch.setitem(presets.PRESETS, "micro", replace(MICRO, source="parquet"))
    assert study(tmp_path / "s", tmp_path / "no data") == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = f"(run `python prepare.py --source parquet --input FILE.parquet --data-dir '{tmp_path / 'no data'}'`)"
    assert len(err) == 1 and err[0].endswith(want), err
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "default"))
    with pytest.raises(DataError, match=re.escape("(run `python prepare.py --source stdlib`)")):
        Layout(tmp_path / "default", "stdlib").prepared()


def test_the_verdicts_bpb_gaps_say_why_they_are_not_given(micro):
    """A new user's probe: the per-axis BPB gaps read n/a with their reason only in summary.json, and the setting's
    limits said they were given either way."""
    s = micro["summary"]
    undefined = {**s, "per_axis": {"defined": False, "reason": "the selection loss does not fall clearly with D (t = "
                                                              "-1.11)", "gaps_bpb": {}}}
    lines = verdict_lines(undefined)
    assert ("The BPB gaps are n/a: the per-axis reading is not defined here (the selection loss does not fall clearly "
            "with D (t = -1.11)).") in lines
    said = any(ln.startswith("The BPB gaps are n/a") for ln in verdict_lines(s))
    assert said is not s["per_axis"]["defined"]  # the micro study's own: said exactly where they are not given
    assert "given either way" not in (micro["out"] / "report.md").read_text()


def test_a_b_minus_a_of_identical_runs_is_said_to_measure_nothing(micro):
    """A new user's probe: at a seed where B rejected nothing, A and B trained alike and B - A read +0.00 with no word,
    where the same case for B - C was said. The micro study's B rejects nothing at either seed: A and B are alike."""
    s = micro["summary"]
    final = {r["name"]: r["final_selection"] for r in s["runs"]}
    assert final["A_s43"] == final["B_s43"] and final["A_s44"] == final["B_s44"]  # the case is met
    said = ("arm A ended with exactly B's selection losses (B rejected nothing, so it trained A's shards): B - A there "
            "is zero by construction, not a measured tie, and says nothing about choosing shards; where the verdict "
            "reads B - A, it reads these zeros as they fell (more seeds could differ).")
    assert f"At seeds 43, 44 {said}" in verdict_lines(s)
    moved = {**final["A_s44"], "mean": final["A_s44"]["mean"] + 0.01}  # seed 44's A trained otherwise
    runs = [dict(r, final_selection=moved) if r["name"] == "A_s44" else r for r in s["runs"]]
    assert f"At seed 43 {said}" in verdict_lines({**s, "runs": runs})


def test_a_finished_run_keeps_no_checkpoint_nor_its_sidecar(micro):
    """A new user's probe: the finished runs' ckpt_*.json sidecars outlived the checkpoints they describe."""
    for r in micro["summary"]["runs"]:
        d = micro["out"] / r["name"]
        assert (d / "final.pt").exists() and not sorted(p.name for p in d.glob("ckpt_*")), r["name"]
