"""A queue run's decision log and records, byte for byte, against a reference committed before the queue was
rebuilt by role (issue 54): the move must change no decision, no number and no byte of what a run writes.

The reference run is the strict calibration's (conftest's `calibrated`: rejections, deferral, a branch check,
quarantine and inspection all occur), with the wall clock and the run id fixed, so that every byte of the log
(its times, its hash chain) is reproducible. Two things are not the run's own and are replaced by a name
before the comparison (the hash chain is then recomputed over the replaced text): the path of the session's
temporary corpus (the start record's config names it), and the SHA256s of the two state files that hold the
host's Python and numpy generator states, which the queue never seeds, so they differ in every process (the
calibrated state's, named in the start record by a digest of calibration.json's key).

Floats agree bitwise only on the machine that made the reference (Python, torch, numpy, CPU: the start
record's `machine`); elsewhere the comparison is skipped with that reason. To write the reference again (only
when a change of behaviour is intended, and said in its commit):
    PACKAUDIT_WRITE_REFERENCE=1 .venv/bin/python -m pytest tests/test_queue_reference.py
"""
import json
import os
import re
import shutil
import time
import uuid

import pytest
import torch
from conftest import ROOT

from errors import DataError
from records.provenance import machine
from shardqueue import api as rq
from shardqueue.engine.log import line_of, record_sha256, verify_chain
from shardqueue.engine.start_record import value_sha256

REFERENCE = ROOT / "tests" / "reference" / "queue_run"
WRITE = os.environ.get("PACKAUDIT_WRITE_REFERENCE") == "1"
FIXED_TIME = 1_800_000_000.0
FIXED_RUN = uuid.UUID(int=0x5EED)
DATA = "<data_dir>"
# what a run writes besides its checkpoints and figure: the records compared byte for byte (final.json only
# describes final.pt's file, whose size and SHA256 follow the unseeded host generators; the decay record
# holds the final parameters' SHA256)
TEXT_FILES = ("decisions.jsonl", "queue_summary.json", "report.md", "decisions.csv", "rotation_v*.json",
              "rotation_v*.json.sha256", "inspection/*.json", "inspection/*.md")


def relinked(text):
    """A decision log's text with every record's prev_sha256 recomputed (after the data path was replaced)."""
    out, prev = [], None
    for line in text.splitlines():
        rec = json.loads(line)
        if rec["seq"] > 1:
            rec["prev_sha256"] = prev
        out.append(line_of(rec))
        prev = record_sha256(rec)
    return "".join(x + "\n" for x in out)


def per_session(root, data):
    """{text: its name} of what differs between sessions and processes (the module's docstring)."""
    state = json.loads((root / "cal" / "calibration.json").read_text())["state_sha256"]
    return {str(data): DATA, state: "<calibrated_state.pt SHA256>", value_sha256(state): "<its digest>"}


def run_files(out, root, data):
    """{relative path: text} of the run's records, what differs between sessions replaced by its name."""
    got, names = {}, per_session(root, data)
    for pattern in TEXT_FILES:
        for p in sorted(out.glob(pattern)):
            text = p.read_text()
            for old, new in names.items():
                text = text.replace(old, new)
            got[str(p.relative_to(out))] = relinked(text) if p.name == "decisions.jsonl" else text
    return got


# the runs: the rule's (every path of the mechanism) and the random policy's (its draws), which the study's
# arms do not run (arm C rejects at fixed positions)
RUNS = {"queue": {}, "random": {"policy": "random", "reject_rate": 0.4, "seed": 5}}
CAL_NAME = "cal"  # the calibration's folder beside the runs: their start records name it "../cal"
_MADE = {}  # strict calibration folder: what reference_runs made in this process


def reference_runs(calibrated, tmp_path_factory):
    """The runs of RUNS on the strict calibration, once per process, their clock and run id fixed: tests/test_queue.py
    reads the same two runs (its `full_run`, the random policy's run) rather than running them again (about 3 CPU
    seconds). {"root": the runs as made (CAL_NAME and one folder per run), "copy": a copy of root made before any
    test reads it, for tests/test_queue.py (read it; copy a run before changing it), "summaries": {run: RunSummary},
    "restored": the spy's (params_sha256, bitwise) of every restore in the rule's run}.

    The spy keeps a copy of the parameters at every snapshot and compares the model with that copy, tensor by
    tensor, after every restore; it changes no state and no random generator, so the records are the run's own."""
    key = str(calibrated["strict"])
    if key not in _MADE:
        from shardqueue.engine.runner import Runner

        root = tmp_path_factory.mktemp("qref")
        shutil.copytree(calibrated["strict"], root / CAL_NAME)
        saved, restored, summaries = {}, [], {}
        snapshot, restore = Runner.snapshot, Runner.restore

        def spy_snapshot(self):
            snap = snapshot(self)
            saved[snap["params_sha256"]] = {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}
            return snap

        def spy_restore(self, snap):
            got = restore(self, snap)
            want = saved[snap["params_sha256"]]
            now = self.trainer.model.state_dict()
            restored.append((got, now.keys() == want.keys() and all(torch.equal(now[k], want[k]) for k in want)))
            return got

        for name, options in RUNS.items():
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(time, "time", lambda: FIXED_TIME)
                mp.setattr(uuid, "uuid4", lambda: FIXED_RUN)
                if name == "queue":
                    mp.setattr(Runner, "snapshot", spy_snapshot)
                    mp.setattr(Runner, "restore", spy_restore)
                summaries[name] = rq.run(root / name, root / CAL_NAME, rq.RunPlan(**options), log=lambda s: None,
                                         report=True)
        copy = tmp_path_factory.mktemp("qrefcopy")
        shutil.copytree(root, copy, dirs_exist_ok=True)
        _MADE[key] = {"root": root, "copy": copy, "summaries": summaries, "restored": restored}
    return _MADE[key]


@pytest.fixture(scope="module")
def reference_run(calibrated, tmp_path_factory):
    """{run/file: text} of the runs (reference_runs: their clock and run id fixed; the calibration copied beside
    them so the start record names it by the same relative path in every session)."""
    root = reference_runs(calibrated, tmp_path_factory)["root"]
    got = {}
    for name in RUNS:
        got.update({f"{name}/{f}": text for f, text in run_files(root / name, root, calibrated["data"]).items()})
    return got


def test_a_queue_run_writes_the_reference_records_byte_for_byte(reference_run):
    here = machine("cpu")
    if WRITE:
        shutil.rmtree(REFERENCE, ignore_errors=True)
        for name, text in reference_run.items():
            (REFERENCE / name).parent.mkdir(parents=True, exist_ok=True)
            (REFERENCE / name).write_text(text)
        (REFERENCE / "machine.json").write_text(json.dumps(here, indent=1, sort_keys=True) + "\n")
    made_on = json.loads((REFERENCE / "machine.json").read_text())
    if made_on != here:
        pytest.skip(f"the reference was made on {made_on}; floats agree bitwise only there (this is {here})")
    want = {str(p.relative_to(REFERENCE)): p.read_text() for p in sorted(REFERENCE.rglob("*"))
            if p.is_file() and p.name != "machine.json"}
    assert sorted(reference_run) == sorted(want)
    assert "queue/inspection/" in " ".join(want) and len(want["queue/decisions.jsonl"].splitlines()) > 30  # every path
    for name in want:
        assert reference_run[name] == want[name], f"{name} differs from the reference"


def test_the_reference_replaces_only_what_differs_between_sessions_and_its_chain_holds():
    """The replaced names are the two the module names (a wider replacement could hide a change), and the
    committed log still chains record to record, so an edit of it would show."""
    log = (REFERENCE / "queue" / "decisions.jsonl").read_text()
    names = {n for p in REFERENCE.rglob("*") if p.is_file() for n in re.findall(r"<[^<>\n]{1,40}>", p.read_text())}
    assert names <= {DATA, "<its digest>"} and DATA in log and "<its digest>" in log
    recs = [json.loads(x) for x in log.splitlines()]
    verify_chain(recs, REFERENCE / "queue" / "decisions.jsonl")
    recs[5]["losses"] = {d: v + 1e-9 for d, v in recs[5]["losses"].items()}
    with pytest.raises(DataError, match="record 7 does not chain"):
        verify_chain(recs, REFERENCE / "queue" / "decisions.jsonl")
