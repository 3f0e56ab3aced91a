"""SUMMARY.md's scorecard rows and provenance fields, from a run folder written by the test."""
import datetime
import json
import platform
import random
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np

from findings.summary import build, main, render
from records.queue_run import RunSummary, ScreenAgreement
from records.reexecution import Difference
from tests.test_findings_summary import _write, calibration, fake_run, reexecution

ROOT = Path(__file__).resolve().parents[1]


def _scorecard(md):
    part = md.split("## Scorecard", 1)[1].split("\n## ", 1)[0]
    rows = [tuple(c.strip() for c in line.strip("|").split("|")) for line in part.splitlines() if line.startswith("| ")]
    return {r[0]: r[1:] for r in rows[1:]}  # section -> (measured, ours, paper, agreement)


def test_scorecard_rows(tmp_path):
    rng = random.Random(3)
    pk, bpb, conf, cells, prefixes = fake_run(tmp_path, rng)
    # known signs: random_crop worse at both seeds, segmented better at seed 43 only
    for (cond, seed), v in {("baseline", 43): 2.0, ("random_crop", 43): 2.1, ("segmented", 43): 1.9,
                            ("baseline", 44): 2.0, ("random_crop", 44): 2.2, ("segmented", 44): 2.05}.items():
        f = tmp_path / "train" / f"{cond}_s{seed}" / "summary.json"
        s = json.loads(f.read_text())
        s["official"]["bpb"] = v
        _write(f, s)
    md = render(build(tmp_path), tmp_path)
    sc = _scorecard(md)
    assert list(sc)[:3] == ["3 Exact source retention", "5.1 Coverage at the horizon", "5.2 Repeated-corpus bounds"]
    # the paper's four deltas are all positive: 3 of our 4 are
    assert sc["5.3 Matched training runs"][3] == "direction agrees in 3 of 4"
    assert "random_crop s43 +0.1000" in sc["5.3 Matched training runs"][1]
    assert "segmented s44 +0.0109" in sc["5.3 Matched training runs"][2]  # the paper's, from paper_values.json
    neg = sum(c["interaction"] < 0 for c in cells)
    excl = sum(c["interval_adjusted"][1] < 0 or c["interval_adjusted"][0] > 0 for c in cells)
    worse = sum(c["begin_delta"] > 0 for c in cells)  # the paper's beginnings all worsen: the card says ours
    better = sum(c["tail_delta"] < 0 for c in cells)
    assert sc["5.5 Source windows: beginnings against tails"][3] == (
        f"interaction's direction agrees in {neg} of 8, interval excludes zero in {excl} of 8; beginnings worse "
        f"(delta > 0) in {worse} of 8, tails better in {better} of 8 (paper: all of each)")
    rev = sum(len(p["reversals"]) for p in prefixes)
    assert sc["5.6 Prefix rankings"][1:3] == (str(rev), "0")
    assert sc["5.6 Prefix rankings"][3].startswith("agrees" if rev == 0 else "DISAGREES")
    assert sc["5.2 Repeated-corpus bounds"][1:3] == ("20", "1,000")
    assert sc["5.2 Repeated-corpus bounds"][3].startswith("not comparable at this scale")
    assert sc["The shard queue"][1] == "not run"
    assert sc["3 Exact source retention"][3] == "agrees"  # every covered packer held it in fake_run


def run_summary(**kw):
    """A queue run's summary that accepted one shard and rejected none; kw: fields to set."""
    return RunSummary(**{"policy": "queue", "seed": 43, "reject_rate": 0.0, "run_id": "r", "accepted": ["a"],
                         "quarantined": [], "deferred_pending": [], "undecided": [], "rejections": {}, "returns": {},
                         "rotations": 1, "accepted_tokens": 10, "spent": {}, "final": None, "start_losses": {},
                         "calibration": calibration(), "curve": [],
                         "screen": ScreenAgreement(3, 0.5, 0.75, 1, "a sketch"), "accepted_records_targets": 10,
                         "harmful_accepted": [], "harmful_quarantined": [], "confounded_recoveries": [], **kw})


def test_queue_rate_rule_separates_point_estimate_and_bound(tmp_path):
    run_summary().write(tmp_path / "queue" / "queue_summary.json")
    md = render(build(tmp_path), tmp_path)
    row = next(line for line in md.splitlines() if "false-rejection rate" in line)
    # no rate_kind: the choosing transitions measured it, so the point estimate meets the rule by construction
    assert row.startswith("| in-sample false-rejection rate")
    assert ("the point estimate meets it by construction (the same transitions chose k and frac); the 95% bound "
            "(22.1%) does not") in row
    assert "With 12 transitions the 95% bound cannot fall below 5% even with no false rejection" in md
    # held out, and 59 transitions: 0 of them gives a bound of 1 - 0.05^(1/59) = 4.95%, under 5%
    run_summary(calibration=calibration(transitions=59, upper95=0.0495, rate_kind="held-out")).write(
        tmp_path / "queue" / "queue_summary.json")
    md = render(build(tmp_path), tmp_path)
    row = next(line for line in md.splitlines() if "false-rejection rate" in line)
    assert row.startswith("| held-out false-rejection rate") and "the point estimate meets it; the 95% bound (5.0%) meets" in row
    assert "cannot fall below 5%" not in md
    run_summary(calibration=calibration(transitions=58, upper95=0.0503, rate_kind="held-out")).write(
        tmp_path / "queue" / "queue_summary.json")
    assert "With 58 transitions the 95% bound cannot fall below 5%" in render(build(tmp_path), tmp_path)


def test_queue_section_says_whether_the_reexecution_held(tmp_path):
    q = tmp_path / "queue"
    run_summary().write(q / "queue_summary.json")

    def row():
        md = render(build(tmp_path), tmp_path)
        return next(line for line in md.splitlines() if "reconstruct --execute" in line), md

    assert "| not run |" in row()[0]
    reexecution().write(q)
    assert "held: records 1-58 reproduced, bitwise (this machine), in 31 s" in row()[0]
    line = "record 12 (train): train_loss: logged 5.0, re-executed 4.5"
    reexecution(held=False, seconds=9.0, difference=Difference(12, "train", "train_loss", 5.0, 4.5, line)).write(q)
    cell, md = row()
    assert "FAILED at record 12 (train_loss)" in cell and f"did NOT reproduce the log: {line}." in md


def test_the_size_is_of_the_folders_the_page_reads(tmp_path):
    """--train and --eval outside --out: their files are counted, each once, and the line names the folders."""
    run, train, evald = tmp_path / "paper", tmp_path / "six", tmp_path / "ev"
    for d, n in ((run, 10), (train / "r1", 200_000), (evald, 500)):
        d.mkdir(parents=True)
        (d / "f.bin").write_bytes(b"x" * n)
    (run / "audit").mkdir()
    (run / "audit" / "a.bin").write_bytes(b"x" * 7)  # --audit inside --out: counted once, not twice
    assert main(["--out", str(run), "--train", str(train), "--eval", str(evald), "--audit", str(run / "audit"),
                 "--data-dir", str(tmp_path / "data")]) == 0
    p = json.loads((run / "findings.json").read_text())["provenance"]
    assert p["run_folder_bytes"] == 10 + 7 + 200_000 + 500  # 0.2 MB
    assert p["run_folders"] == [str(run), str(train), str(evald)]
    assert f"| run folder size | 0.2 MB (of `{run}`, `{train}`, `{evald}`) |" in (run / "SUMMARY.md").read_text()


def test_provenance_fields(tmp_path):
    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir()
    (run / "stage_times.json").write_text(json.dumps({"audit": 12.5, "prepare": 30.0}))  # 32 bytes
    (run / "blob.bin").write_bytes(b"x" * 1000)
    _write(data / "stdlib" / "prepared.json", {"build_id": "f00d"})
    assert main(["--out", str(run), "--data-dir", str(data)]) == 0
    p = json.loads((run / "findings.json").read_text())["provenance"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert p["git_commit"] == head and isinstance(p["git_dirty"], bool)
    assert (p["python"], p["torch"], p["numpy"]) == (platform.python_version(), metadata.version("torch"), np.__version__)
    assert p["cpu"] and isinstance(p["gpus"], list)
    assert p["corpus_build_id"] == "f00d"
    assert p["date_utc"].startswith(datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    assert p["stage_seconds"] == [["prepare", 30.0], ["audit", 12.5]]  # the main job's order
    assert p["run_folder_bytes"] == 1000 + 32  # the folder before SUMMARY.md and findings.json
    md = (run / "SUMMARY.md").read_text()
    for text in (f"git {head}", f"Python {platform.python_version()}", "build id f00d", "prepare 30 s, audit 12 s",
                 "0.0 MB"):
        assert text in md.split("## Provenance", 1)[1].split("\n## ", 1)[0], text
