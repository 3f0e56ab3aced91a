"""What each queue command writes into its --out folder, and the refusal of a folder that holds anything else: a
run wrote its report.md over a user's, calibrate its config.json, the study its report.md and summary.json (a new
user's probe). A name counts as a command's own only beside that command's earlier output (its markers)."""
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from errors import DataError
from shardqueue.calibration import CALIBRATION_FILES
from shardqueue.engine.run_folder import RUN_FILES


@dataclass(frozen=True)
class Output:
    """What one command writes into its folder: the names of its entries (fnmatch patterns), its markers (names only
    it writes: a folder holding one holds its earlier output) and what it writes in subfolders (pattern, outputs)."""
    what: str
    names: tuple
    markers: tuple
    inside: tuple = ()


# What each command writes into its --out folder, read from the code and a real folder of each. A file of these
# names is the command's own only beside one of its markers: report.md beside no decision log is a user's, and a run
# would write over it. previous/ is where --fresh moves an earlier run or calibration (move_aside).
CALIBRATION = Output("calibration", CALIBRATION_FILES + ("previous",),
                     ("pool.json", "pool.json.sha256", "calibration_plan.json", "calibration.json", "previous"))
RUN = Output("run", RUN_FILES + ("previous",), ("decisions.jsonl", "decisions.jsonl.torn", "ckpt_*", "start_state.json",
                                                "start_state.pt", "previous"))
DOSE = Output("dose", ("dose.json", "dose.md"), ("dose.json",))  # dose's default --out is the queue folder
# run's and calibrate's --out: a run beside its calibration (run's default), dose's results beside them
QUEUE_FOLDER = (CALIBRATION, RUN, DOSE)
# the study's --out (shardqueue/study/run.py): stage A, a folder per run, the seeds' start states, the report
STUDY_RUN = Output("study run", RUN.names + ("study_run.json",), RUN.markers + ("study_run.json",))
START_STATES = Output("start states", ("s*.pt", "s*.json"), ("s*.pt", "s*.json"))
STUDY = Output("study", ("summary.json", "report.md", "provenance.json", "stage_a_seconds.json", "selection.png",
                         "control_b.png", "screen_vs_rise.png", "compute.png", "decisions_B.parquet", "decisions_B.csv",
                         "stage_a", "start_states", "[ABC]_s[0-9]*"),
               ("stage_a", "stage_a_seconds.json", "start_states", "[ABC]_s[0-9]*"),
               (("stage_a", (CALIBRATION,)), ("[ABC]_s[0-9]*", (STUDY_RUN,)), ("start_states", (START_STATES,))))
# the machinery's own, in any folder: the folder lock, a write a kill cut short (removed at the next start), a
# Ray node's probe token
SCRATCH = (".lock", ".*.tmp", ".fanout-probe-*")


def _matches(name, patterns) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def foreign_entries(folder, outputs) -> list:
    """The entries of folder (relative paths, its subfolders' included) that none of `outputs` wrote there."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    entries = sorted(p for p in folder.iterdir() if not _matches(p.name, SCRATCH))
    present = [o for o in outputs if any(_matches(p.name, o.markers) for p in entries)]
    bad = []
    for p in entries:
        owner = next((o for o in present if _matches(p.name, o.names)), None)
        if owner is None:
            bad.append(p.name)
            continue
        for pattern, inner in owner.inside:
            if p.is_dir() and fnmatchcase(p.name, pattern):
                bad += [f"{p.name}/{q}" for q in foreign_entries(p, inner)]
    return bad


def refuse_foreign_files(out, outputs, command):
    """--out as `command` may write into it, before anything is written: new, empty, or holding only the earlier
    output of `outputs` (which the command's own checks then take: an earlier run resumed, moved aside by --fresh or
    refused); anything else is refused in one line (before, a run wrote its report.md over a user's)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: is a file, not a folder")
    bad = foreign_entries(out, outputs)
    if bad:
        whose = ", ".join(o.what + "'s" for o in outputs[:-1]) + (" or " if len(outputs) > 1 else "") + outputs[-1].what
        raise DataError(f"--out {out}: holds {', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}, not an earlier "
                        f"{whose}'s output, which {command} would write beside or over; give a new or empty folder, "
                        "or move them")
