#!/usr/bin/env python3
"""The rollback shard queue of the proposal "Can a model help choose its next training data?".

  python queue/run_queue.py calibrate --config CFG.json [--set key=value ...] [--domains domains.json] --out runs/queue
  python queue/run_queue.py run --out runs/queue [--policy queue|plain|random] [--resume | --fresh] [--add-source NAME=PATH]
  python queue/run_queue.py dose --out runs/queue_dose --calibration runs/queue [--harm KIND | --harm parquet --harm-parquet BAD.parquet]
  python queue/run_queue.py return SHARD --out runs/queue    # one return from quarantine (needs an inspection,
                                                            # and a run stopped before its end: then --resume)
  python queue/run_queue.py reconstruct --out runs/queue     # replay the log and check every record
  python queue/run_queue.py reconstruct --execute --out runs/queue   # ... and re-run it: every logged number

`calibrate` (stage A) freezes the pool (pool.json + .sha256: calibration, reserve, candidate,
decay and harmful shards with their SHA256s and source mix, the control/selection set
hashes and their 13-gram overlap with the pool), trains warm-up shards of one homogeneous
source, estimates sigma_d on ten more, and chooses k and the recovery fraction from a
grid written down first (calibration_plan.json) on transitions held out of the sigma
estimate; it fails when no grid point keeps the false-rejection rate on them below 5%.
`run` works through rotations of the pool from the calibrated state at a constant
learning rate: every shard is screened (forward only), trained once whole, measured on
the control domains and decided; a flagged shard is judged after one recovery shard (a
reserve shard of the calibration source, never a candidate); an unrecovered one is rolled
back bitwise, branch-checked in the first rotation (clean or literal, a calibration
setting), deferred to the next rotation (its own manifest), quarantined on a second
rejection and inspected. At the end a linear decay to
LR 0 runs on reserved fresh pool shards and the final model is scored (official metric,
control and selection domains). Then report.md, decisions.parquet/.csv and a figure. A
finished `run` exits 0 whatever it decided: a planted harmful shard accepted is its result,
stated first in report.md and on a 'result:' line (`run --help`).
Config overrides are given to calibrate as `--set key=value` (never as bare words). Each
command has its own options: `python queue/run_queue.py COMMAND --help`.
"""
import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: shardqueue, corpus, training

from console.shutdown import skip_final_collections  # noqa: E402
from corpus.layout import default_data_dir  # noqa: E402
from corpus.runlock import FolderLocked, folder_lock  # noqa: E402
from errors import DataError, os_error_line  # noqa: E402
from shardqueue.engine.log import read_log  # noqa: E402
from shardqueue.settings import BRANCH_CHECKS, DEFAULT_TOLERANCE, POLICIES, QueueSettings, check_seed  # noqa: E402

DEFAULT_FOLDER = "runs/queue"  # a queue's folder, and where dose looks for a calibration unless told
RUN_EXIT_STATUS = (
    "Exit status: 0 when the run finished, whatever the queue decided. A planted harmful shard that ended "
    "accepted is a result of the run, not an error: the console says so on a line of its own starting "
    "'result:', report.md states it in its first section, and queue_summary.json lists it under "
    "harmful_accepted (read that to act on it in a script). 2: an input refused, in one 'error:' line, "
    "before anything is trained; 130: interrupted (the run keeps what it wrote: --resume goes on).")

# Late imports: the queue's commands (shardqueue.api, dose, replay, reexecute, domains, sources) and the device policy
# load torch; main() imports them after parsing, so `--help` answers without it (torch takes seconds to import)


class OneLineParser(argparse.ArgumentParser):
    """A parser whose refusals are one `error:` line and status 2, as every other refusal of this command line
    (argparse's own error prints the usage first)."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message}\n")


# what each of stage A's counts is (QueueSettings; the pool is shardqueue/world/pool.py), for calibrate --help
COUNT_HELP = {
    "shard_tokens": "tokens a pool shard holds at least (every role's shards)",
    "warmup_shards": "calibration-source shards stage A trains first, before any noise is measured",
    "sigma_shards": "calibration-source shards whose transitions measure each domain's noise sigma",
    "held_out_shards": "shards whose transitions, held out of sigma, choose k and the recovery fraction",
    "candidates": "ordinary candidate shards in the pool, the queue's input",
    "decay_shards": "shards kept for the final decay (learning rate to 0) after the queue",
    "harmful_shards": "planted harmful candidate shards (remapped copies of training documents)",
    "prose_shards": "candidate shards of a prose source: a change of domain, not harm",
    "late_shards": "shards of a source that enters at a later rotation (its own calibration shards beside them)",
    "per_domain": "documents in each control and selection domain's held-out set",
    "pool_seed": "the seed of the pool's draws and order (0 to 4,294,967,295)",
    "damaged_shards": "candidate shards damaged on purpose (the study's dose; shardqueue/world/damaged_pool.py)",
    "choose_transitions": "held-out transitions that choose k and the fraction; the rate is reported on the rest "
                          "(0: chosen and reported on all, in-sample)",
    "checkpoints_per_shard": "checkpoints inside each held-out shard, each a transition",
    "reserve_shards": "calibration-source shards held back from stage A for recovery shards and clean branches",
}


def build_parser():
    """One parser per command, each with its own options and --help; --out and --device on all."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", default=DEFAULT_FOLDER,
                        help=f"queue folder (default {DEFAULT_FOLDER}); run and calibrate take a new or empty one, or "
                             "one holding only an earlier calibration's, run's or dose's output")
    common.add_argument("--device", default="auto",
                        help="torch device: auto (cuda when available, else cpu), cpu, cuda or cuda:N")
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="{calibrate,run,dose,return,reconstruct}")

    cal = sub.add_parser("calibrate", parents=[common], help="stage A: freeze the pool, train warm-up and sigma "
                         "shards, choose k and the recovery fraction on transitions held out of sigma",
                         description="Stage A, once per pool: build and freeze the pool (pool.json and its SHA256), "
                         "train the warm-up shards, measure each domain's noise sigma on the sigma shards, and choose "
                         "k and the recovery fraction on transitions held out of sigma; `run` then trains on this "
                         "folder. Needs --config, the training config (the main job writes one: runs/main/queue/"
                         "config.json).")
    cal.add_argument("--config", default=None, help="training config JSON (needed: the model shape, data root and "
                     "source stage A trains with)")
    cal.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    defaults = QueueSettings()
    for k in QueueSettings.counts():
        cal.add_argument(f"--{k.replace('_', '-')}", type=int, default=getattr(defaults, k),
                         help=f"{COUNT_HELP[k]} (default {getattr(defaults, k)})")
    cal.add_argument("--held-out-branch", default="false", metavar="true|false",
                     help="held-out transitions on a branch that is then discarded (default false)")
    cal.add_argument("--branch-check", default=defaults.branch_check, metavar="|".join(BRANCH_CHECKS),
                     help="the branch check of a first-rotation rejection: clean (a branch on a reserve shard of the "
                          "calibration source: only its rise blames the training phase; default) or literal (the "
                          "proposal's branch on another shard of the same source)")
    cal.add_argument("--domains", default=None, metavar="FILE",
                     help="control and selection domains from a JSON file (names and rules; see shardqueue/world/domains.py)")
    cal.add_argument("--fresh", action="store_true", help="move an earlier calibration or run in --out aside first")

    run_ = sub.add_parser("run", parents=[common], help="one queue run through the rotations, decay and scores",
                          description="One queue run through the rotations, the final decay and the scores.",
                          epilog=RUN_EXIT_STATUS)
    run_.add_argument("--calibration", default=None, help="calibration folder (default: --out)")
    run_.add_argument("--add-source", action="append", default=[], metavar="NAME=PATH",
                      help="a new source (a parquet file of documents) that enters at the next rotation boundary, "
                           "after its input checks and its own calibration; repeatable")
    run_.add_argument("--policy", choices=POLICIES, default="queue", help="queue (the rule), plain, random")
    run_.add_argument("--reject-rate", type=float, default=0.0, help="--policy random: rejection probability")
    run_.add_argument("--seed", type=int, default=None,
                      help="model init and in-rotation order, 0 to 4,294,967,295 (default: calibration's)")
    run_.add_argument("--budget-targets", type=int, default=None, help="stop after this many accepted targets")
    run_.add_argument("--rotation-shards", type=int, default=6, help="a rotation boundary every N shards")
    run_.add_argument("--no-branch-check", action="store_true", help="skip the branch check of first-rotation rejections")
    start = run_.add_mutually_exclusive_group()  # each names what to do with an earlier run: never both
    start.add_argument("--resume", action="store_true", help="continue an interrupted run")
    start.add_argument("--fresh", action="store_true", help="move an earlier run in --out aside first")

    dose = sub.add_parser("dose", parents=[common], help="dose-response: flag and reject rates against the exact "
                          "harmful share of a shard")
    dose.add_argument("--calibration", default=None, help=f"calibration folder (default {DEFAULT_FOLDER})")
    dose.add_argument("--harm", default="cipher",
                      help="cipher, a damage kind of shardqueue/world/damage.py (mojibake, boilerplate, line_shuffle, "
                           "truncate, ...), or parquet (your own bad documents, --harm-parquet)")
    dose.add_argument("--harm-parquet", default=None, help="--harm parquet: a parquet file of bad documents (text column)")
    dose.add_argument("--trials", type=int, default=4, help="ordinary shards per fraction (default 4)")

    ret = sub.add_parser("return", parents=[common], help="one return from quarantine, to the next rotation (needs an "
                         "inspection that found no cause, and a run stopped before its end: --resume it after)")
    ret.add_argument("shard", help="the quarantined shard")
    rec = sub.add_parser("reconstruct", parents=[common], help="replay the log and check every record; with "
                         "--execute, also run the queue again and check every logged number")
    rec.add_argument("--execute", action="store_true",
                     help="re-run the queue from its start state and check every logged number (losses, deltas, "
                          "targets, train loss, parameter SHA256s) against what training produces now: bitwise on "
                          "the machine that made the run, within --tolerance elsewhere")
    rec.add_argument("--from-checkpoint", default=None, metavar="CKPT",
                     help="re-execute only the records after this checkpoint of the run folder (ckpt_<seq>.pt; "
                          "implies --execute)")
    rec.add_argument("--to-record", type=int, default=None, metavar="SEQ",
                     help="end the re-executed stretch at this record (default: the log's last; implies --execute)")
    rec.add_argument("--tolerance", type=float, default=None,
                     help="absolute tolerance on every float (default: 0, bitwise, on the machine that made the "
                          f"run; {DEFAULT_TOLERANCE:g} elsewhere, where parameter SHA256s are not compared)")
    return ap


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    a, extra = build_parser().parse_known_args(argv)
    try:  # what needs no torch is refused before the imports below load it (seconds)
        check_arguments(a, extra)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from shardqueue.api import (RunPlan, calibrate, describe_calibration, describe_run, prose_note,
                                return_from_quarantine, run)
    from shardqueue.checks.reexecute import reexecute_folder
    from shardqueue.checks.replay import reconstruct_folder
    from shardqueue.study.dose import dose_response
    from shardqueue.world.domains import load_domains
    from training.device import configure, resolve_device

    out = Path(a.out)
    made = not out.exists()  # a refusal leaves no folder of its own making (one found in stage A: a domain of no text)
    try:
        a.device = resolve_device(a.device, "--device")
        configure(a.device)
        if a.command == "run":
            plan = RunPlan(policy=a.policy, seed=a.seed, reject_rate=a.reject_rate, budget_targets=a.budget_targets,
                           rotation_shards=a.rotation_shards, branch_check=not a.no_branch_check)
            if not a.resume:  # before the reads below; a resume is held to its start record instead
                plan.check_new()
        check_reads(a, out)
        if a.command == "reconstruct":
            check_stretch(a, out)
            rc = reconstruct_folder(out)
            if rc or not (a.execute or a.from_checkpoint or a.to_record is not None):
                return rc
            return reexecute_folder(out, a.device, a.from_checkpoint, a.to_record, a.tolerance)
        with folder_lock(out, f"queue {a.command}"):
            if a.command == "return":
                return return_from_quarantine(out, a.shard)
            if a.command == "calibrate":
                s = {k: getattr(a, k) for k in QueueSettings.counts()}
                s["held_out_branch"] = a.held_out_branch
                s["branch_check"] = a.branch_check
                if a.domains:
                    s["domains"] = load_domains(a.domains)
                rec = calibrate(out, a.config, a.set, s, a.device, fresh=a.fresh)
                if not rec["ok"]:
                    print(f"error: calibration failed: {rec['reason']}", file=sys.stderr)
                    return 1
                # the pool as written: its roles say whether the prose shard asked for was planted
                pool = json.loads((out / "pool.json").read_text())
                print(describe_calibration(rec, prose_note(QueueSettings.of(s), pool)))
                return 0
            if a.command == "dose":
                dose_response(out, a.calibration or DEFAULT_FOLDER, trials=a.trials, device=a.device, harm=a.harm,
                              harm_parquet=a.harm_parquet)
                return 0
            summary = run(out, a.calibration, plan, a.resume, a.fresh, a.device, add_sources=a.add_source)
            line, through = describe_run(summary, out)
            print(line)
            if through:  # what the finished run found, on a line of its own; not a failure (EXIT_STATUS)
                print(through)
            return 0
    except (DataError, FolderLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e, out)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the log and checkpoints are written atomically: what is there stays usable
        again = {"run": "; continue it with the same command and --resume", "calibrate": "; rerun it to finish stage A"}
        print(f"interrupted: {a.command} stopped; {out} keeps what it had written{again.get(a.command, '')}",
              file=sys.stderr)
        return 130


def check_reads(a, out):
    """What the command reads, there and readable before its folder is made and locked (no .lock left by a
    refusal, no empty folder)."""
    # late, as main()'s: these load torch through the queue's modules, and the parser's refusals come first
    from shardqueue.api import check_calibrated
    from shardqueue.calibration import check_prepared, load_config
    from shardqueue.out_folder import QUEUE_FOLDER, refuse_foreign_files
    from shardqueue.study.dose import check_harm
    from shardqueue.world.corpus_view import check_vocab
    from shardqueue.world.domains import load_domains
    from shardqueue.world.sources import parse as parse_source

    # never a file of the user's written over, or beside a run's own; a resume continues the run its folder holds,
    # writing only that run's names beside its log, so nothing of the user's is at risk and an interrupted run is
    # not stranded by a file dropped beside it
    if a.command == "calibrate" or (a.command == "run" and not a.resume):
        refuse_foreign_files(out, QUEUE_FOLDER, f"`{a.command}`")
    if a.command == "run":
        check_calibrated(a.calibration or out)
        if not a.resume:  # a resume holds config.json to its start record's copy instead, naming each key
            check_started_config(a.calibration or out)
        if a.resume and not (out / "decisions.jsonl").exists():
            raise DataError(f"{out / 'decisions.jsonl'}: nothing to resume")
        for spec in a.add_source:
            parse_source(spec)
    if a.command == "calibrate":
        if a.config is None:
            raise DataError("calibrate needs --config CFG.json, the training config (model shape, data root, source; "
                            "the main job writes one, runs/main/queue/config.json): without it stage A would train "
                            "the default, paper-scale model")
        if a.domains:
            load_domains(a.domains)  # a missing or malformed domains file
        cfg = load_config(a.config, a.set)  # a missing file, a bad --set
        check_prepared(cfg.data_dir or default_data_dir(), cfg.source, "--set source={}")  # another source there
        check_vocab(cfg)  # a corpus the model does not fit
    if a.command == "dose":
        check_calibrated(a.calibration or DEFAULT_FOLDER)
        check_started_config(a.calibration or DEFAULT_FOLDER)
        check_harm(a.harm, a.harm_parquet)  # a bad kind, or a missing --harm-parquet file
    if a.command == "return" and not (out / "decisions.jsonl").exists():
        raise DataError(f"{out / 'decisions.jsonl'}: no decision log")


def check_started_config(folder):
    """config.json as stage A calibrated with it, for a command that starts from the calibrated state; a calibration
    from before its config was recorded is used all the same (refusing it would retire every existing folder), and
    the note says what goes unchecked."""
    # late: the queue's modules load torch, which main() imports only once the arguments are good
    from shardqueue.calibration import check_config

    if not check_config(folder):
        print(f"note: {folder} predates calibrated_config.json, the record of the config stage A calibrated with, "
              "so an edit of its config.json cannot be caught (calibrate again to get it)")


def check_arguments(a, extra):
    """Arguments this command does not take, a bad shard id, counts and branch check, in one line each."""
    if extra:
        raise DataError(f"unexpected argument{'s' * (len(extra) > 1)} {' '.join(extra)!r} for `{a.command}`"
                        + ("; give config overrides to calibrate as --set key=value"
                           if any("=" in x and not x.startswith("-") for x in extra) else ""))
    if a.command == "return" and "=" in a.shard:
        raise DataError(f"{a.shard!r} is not a shard id")
    check_counts(a)
    if a.command == "calibrate":
        QueueSettings.of({"branch_check": a.branch_check})  # a bad kind is named before the folder is touched


# the least each count may be (the settings' own; a run of 0-shard rotations trains nothing)
MINIMA = {**QueueSettings.MINIMA, "rotation_shards": 1, "budget_targets": 1, "to_record": 1, "tolerance": 0, "trials": 1}
SEEDS = ("seed", "pool_seed")  # run's and calibrate's seeds: in the range every generator they seed takes


def check_stretch(a, out):
    """reconstruct's --from-checkpoint and --to-record, refused before the replay prints its lines: a checkpoint that
    is not there, a record past the log's last (the re-execution checks the rest: whether the checkpoint anchors)."""
    if a.from_checkpoint:
        path = Path(a.from_checkpoint) if Path(a.from_checkpoint).parent != Path(".") else out / a.from_checkpoint
        if not path.is_file():
            raise DataError(f"--from-checkpoint {a.from_checkpoint}: {path} not found")
    log = out / "decisions.jsonl"
    if a.to_record is not None and log.is_file():
        try:
            n = len(read_log(log, log=lambda s: None))  # as the re-execution reads it: a torn last line is no record
        except DataError:
            return  # a damaged log: the replay names it, as a failed check (status 1)
        if a.to_record > n:
            raise DataError(f"--to-record {a.to_record}: {log} holds {n} records")


def check_counts(a):
    """The counts this command takes, each at least its minimum, and its seeds (in one line naming the option)."""
    for k, least in MINIMA.items():
        v = getattr(a, k, None)  # a command has only its own options
        if v is not None and not v >= least:  # NaN is no count either
            raise DataError(f"--{k.replace('_', '-')} {v}: must be at least {least}")
    for k in SEEDS:
        if getattr(a, k, None) is not None:
            check_seed(getattr(a, k), f"--{k.replace('_', '-')}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
