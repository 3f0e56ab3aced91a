#!/usr/bin/env python3
"""The main job on the built-in offline corpus, every stage in order.

  ./run.sh main [--data-dir DIR] [--out runs/main] [--stages prepare,audit,train,freeze,eval,...]

Read runs/main/SUMMARY.md first: what was found, section by section, beside the paper's values.
A subset of stages runs in the order below; eval needs the protocol that freeze writes.

prepare  offline corpus (this Python's standard library) -> tokenizer (vocab 8192)
         -> pre-tokenized shards -> length census
audit    the four packers replayed on lengths at a budget scaled to the corpus; the paper's loader
         at 8 ranks, a packer per rank over every 8th document, beside one stream (audit_ranks8);
         the frontier of buffer size and packer (frontier/); then every packer and loader (ours,
         concatenate-and-chunk, TRL, OLMo-core, torchtune, torchtitan, Megatron-Core, Grain, and
         llm-foundry, LLaMA-Factory and axolotl as rules) with one budget: one comparison table
         (audit_packers/report.md), a packer that stops short of the budget said so
train    the six tiny configs (baseline / random_crop / segmented x seeds 43, 44) on CPU,
         each ending with its official score, and the section 5.3-style table
freeze   the comparison protocol (configs, populations, seeds, bootstrap, corpus and code
         SHA256s) and a SHA256 manifest of the checkpoints, before any confirmation pass
eval     under that protocol: source windows, position bins and paired bootstraps on two populations, the
         confirmation score and prefix rankings of the six checkpoints, then the
         numpy checkers recompute every number from the evidence files
queue    the rollback shard queue ("Can a model help choose its next training data?") on the
         offline corpus with a model smaller than tiny: calibration on one homogeneous source
         (sigma_d on ten shards, the false-rejection rate on held-out ones), then rotations of
         a pool holding a harmful source (real documents through a corrupted token mapping):
         flagged, recovery check, bitwise rollback, deferral, retry in rotation 2, quarantine,
         inspection; final decay and scores; every record checked by `reconstruct`, then the run
         executed again from its start state and every logged number compared (bitwise here)
queue_study  the proposal's experiment at tiny scale: stage A once, arms A (plain) / B (queue) /
         C (random rejection, as many as B) x seeds 43, 44, selection axis after the decay,
         efficiency points, the adoption rule, its paired intervals and its verdict (queue_study/report.md)
summary  SUMMARY.md and findings.json from all the results above, the paper's values beside
         ours; the headlines are printed
Each stage prints where it reads and writes; results land under --out.
"""
import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

from console.shutdown import skip_final_collections
from console.usage import interrupted_line
from corpus.atomic import atomic_write_json
from errors import DataError, check_out_folder
from records.reexecution import Reexecution

PAPER_RANKS = 8  # the paper's 8 GPUs (README: torchrun --nproc_per_node=8)
STAGES = ("prepare", "audit", "train", "freeze", "eval", "queue", "queue_study", "summary")
# Late imports: each stage imports what it drives when it runs, and main() the device policy (torch) after
# parsing: `--help` loads none of them (a third of the import time) and a run of a few stages only theirs


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--out", default="runs/main", help="results folder (default runs/main)")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma list of {', '.join(STAGES)}")
    args = ap.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        print(f"error: unknown stage(s) {', '.join(bad)}; choose from {', '.join(STAGES)}", file=sys.stderr)
        return 2
    try:
        check_out_folder(args.out)  # before any stage: a folder that cannot be made is refused, not found at the end
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from training.device import configure, resolve_device

    configure(resolve_device("auto"))  # every stage runs in this process; CPU settings must precede the first tensor
    out = Path(args.out)
    t0 = time.time()
    clock = StageClock(out)
    for name in STAGES:
        if name not in stages:
            continue
        clock.start(name)
        title, run = STAGE_RUNS[name]
        print(f"{'' if name == 'prepare' else chr(10)}== stage: {name} ({title})", flush=True)
        try:
            rc = run(out, args.data_dir, clock)
        except KeyboardInterrupt:  # a stage without a Ctrl-C line of its own (freeze, the summary)
            rc = 130
        if rc == 130:  # a stage's command line ended on Ctrl-C (its line said what it kept): the job goes on as a whole
            print(interrupted_line("python main.py", argv, f"stopped in stage {name}; finished stages are skipped"),
                  file=sys.stderr)
        if rc:
            return rc
        gc.collect()  # a stage's garbage goes before the next begins: a training run freezes what exists, uncollected
    clock.stop()
    from records.provenance import folder_bytes

    summary = out / "SUMMARY.md"
    read = f"read {summary}" if summary.exists() else "no SUMMARY.md yet (the summary stage makes it: --stages summary)"
    print(f"\nmain job done in {time.time() - t0:.0f}s; results under {out}/ ({folder_bytes(out) / 1e6:,.0f} MB); "
          f"{read}")
    return 0


def data_dir_args(data_dir):
    return ["--data-dir", data_dir] if data_dir else []


def prepare_stage(out, data_dir, clock):
    import prepare

    return prepare.main(["--source", "stdlib", *data_dir_args(data_dir)])


FRONTIER = ["--sweep", "buffer=1,10,100,1000,10000", "--sweep", "packer=original,lossless,segment_first,random_span"]


def audit_stage(out, data_dir, clock):
    from audit.__main__ import audit_offline
    from audit.__main__ import main as audit_main

    dd = data_dir_args(data_dir)
    rc = audit_main(["--source", "stdlib", *dd, "--out", str(out / "audit")])
    if rc:
        return rc
    print("\n-- the development stream (--split val), as the paper audits its official metric's stream", flush=True)
    rc = audit_main(["--source", "stdlib", "--split", "val", "--packers", "original", *dd, "--out", str(out / "audit_val")])
    if rc:
        return rc
    print(f"\n-- the paper's loader at {PAPER_RANKS} ranks: a packer and buffer per rank over its share, beside one stream",
          flush=True)
    rc = audit_main(["--source", "stdlib", "--packers", "original", "--ranks", str(PAPER_RANKS), "--permutations", "0",
                     "--no-figures", *dd, "--out", str(out / "audit_ranks8")])
    if rc:
        return rc
    print("\n-- the frontier: the paper's four packers at five buffer sizes, what to change so every long source "
          "starts", flush=True)
    rc = audit_main(["--source", "stdlib", *dd, *FRONTIER, "--out", str(out / "frontier")])
    if rc:
        return rc
    print("\n-- every packer with one budget: ours, concatenate-and-chunk and the installed libraries' packers and "
          "loaders, run on tracer documents", flush=True)
    return audit_offline(data_dir, out / "audit_packers")


def train_stage(out, data_dir, clock):
    from comparison.run_six import main as run_six
    from presets.six import configs

    if (out / "train" / "results.json").exists() and all(
            (out / "train" / c["name"] / "summary.json").exists() for c in configs("tiny")):
        clock.keep()  # every run finished: the tables are rebuilt from them, nothing is trained
    return run_six(["--preset", "tiny", *data_dir_args(data_dir), "--out", str(out / "train")])


def freeze_stage(out, data_dir, clock):
    from comparison.freeze import main as freeze_main
    from manifests.__main__ import main as manifest_main

    if (out / "protocol.json").exists():  # frozen once; a rerun must not re-freeze after results exist
        print(f"protocol already frozen: {out / 'protocol.json'}")
        clock.keep()
        return 0
    return freeze_main(["--preset", "tiny", *data_dir_args(data_dir), "--out", str(out / "protocol.json")]) or manifest_main(
        ["write", str(out / "train"), "--glob", "ckpt_*.pt", "--out", str(out / "checkpoints.sha256")])


def eval_stage(out, data_dir, clock):
    from eval.__main__ import main as eval_main
    from manifests.__main__ import verify_manifest

    if (out / "checkpoints.sha256").exists() and not verify_manifest(out / "checkpoints.sha256"):
        return 1
    proto = ["--protocol", str(out / "protocol.json")] if (out / "protocol.json").exists() else []
    rc = eval_main(["--runs", str(out / "train"), *data_dir_args(data_dir), "--out", str(out / "eval"), *proto])
    if rc:
        return rc
    for chk in ("verify_window_evidence.py", "verify_evaluation_summary.py", "verify_confirmation.py"):
        rc = subprocess.call([sys.executable, str(Path(__file__).parent / "checkers" / chk), str(out / "eval")])
        if rc:
            return rc
    return 0


def summary_stage(out, data_dir, clock):
    from findings.summary import main as summary_main

    clock.drop()  # the summary reports every other stage's time; its own is not over when it writes them
    return summary_main(["--out", str(out), *data_dir_args(data_dir)])


QUEUE_BUDGET = 24000  # accepted targets of the main job's queue run


def queue_stage_settings():
    """The main job's calibration settings: the defaults with a candidate pool sized for its budget
    (16 shards reach it; 14 candidates ran dry and left a flagged shard undecided)."""
    from shardqueue.api import candidates_for_budget
    from shardqueue.settings import QueueSettings

    return QueueSettings(candidates=candidates_for_budget(QUEUE_BUDGET, QueueSettings().shard_tokens))


class StageClock:
    """Wall seconds per stage, kept in OUT/stage_times.json as each stage ends: the time of the work
    that made the stage's results. A stage that finds its results finished calls keep(), and the
    time recorded when they were made stays; a stage that recomputes (the audit, eval) records anew."""

    def __init__(self, out):
        self.path, self.name, self.t, self.kept = Path(out) / "stage_times.json", None, None, False

    def start(self, name):
        self.stop()
        self.name, self.t, self.kept = name, time.time(), False

    def keep(self):
        """The running stage did no work: its earlier time, if one was recorded, stays."""
        self.kept = True

    def drop(self):
        """End the running stage without recording a time."""
        self.name = None

    def stop(self):
        if self.name is None:
            return
        try:
            times = json.loads(self.path.read_text())
        except (OSError, ValueError):
            times = {}
        if self.kept and self.name in times:
            self.name = None
            return
        times[self.name] = round(time.time() - self.t, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, times)
        self.name = None


def run_queue_stage(qdir, data_dir, on_skip=lambda: None):
    """The rollback shard queue end to end: calibrate, run with a harmful source, reconstruct, re-execute.

    The model is smaller than the tiny preset (depth 1, width 32, context 64) and an update
    is 2 rows, so a 1,500-token shard is 12 updates: enough for a corrupted shard to show
    a rise well above the calibrated threshold, small enough for the stage to take about
    a minute and a half of CPU time. The re-execution, which runs the queue again from its
    start state, adds about 40 s of it (measured: 106 s of CPU for the whole stage, 78 of its
    190 s wall on a shared two-core machine).
    """
    from errors import DataError
    from corpus.runlock import FolderLocked, folder_lock
    from presets.shapes import QUEUE_DEMO
    from presets.six import PRESETS
    from shardqueue import api
    from shardqueue.checks.reexecute import RESULT, reexecute_folder
    from shardqueue.checks.replay import reconstruct_folder
    from training.device import resolve_device

    device = resolve_device("auto")  # as queue/run_queue.py's default; main() has configured it
    qdir.mkdir(parents=True, exist_ok=True)
    if (qdir / "queue_summary.json").exists() and _held(qdir / RESULT):
        print(f"already done ({qdir / 'queue_summary.json'}, {qdir / RESULT})")
        on_skip()
        return 0
    cfg = {**PRESETS["tiny"], **QUEUE_DEMO, "micro_rows": 2, "accum": 1, "updates": 1000, "eval_batches": 4,
           "eval_rows": 8, "name": "queue"}
    if data_dir:
        cfg["data_dir"] = data_dir
    if not (qdir / "config.json").exists():
        (qdir / "config.json").write_text(json.dumps(cfg, indent=2))
    try:
        with folder_lock(qdir, "queue (main job)"):
            if not (qdir / "calibration.json").exists():
                rec = api.calibrate(qdir, str(qdir / "config.json"), (), queue_stage_settings(), device, fresh=True)
                if not rec["ok"]:
                    print(f"error: calibration failed: {rec['reason']}", file=sys.stderr)
                    return 1
                print(api.describe_calibration(rec))
            summary = api.run(qdir, None, api.RunPlan(budget_targets=QUEUE_BUDGET),
                              resume=(qdir / "decisions.jsonl").exists(), device=device)
            line, through = api.describe_run(summary, qdir)
            print(line)
            if through:  # a result of the run (SUMMARY.md's queue headline counts it), not a failed stage
                print(through)
    except (DataError, FolderLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rc = reconstruct_folder(qdir)
    if rc:
        return rc
    print("-- the run executed again from its start state: every logged number against what training gives now",
          flush=True)
    return reexecute_folder(qdir, device)


def _held(path):
    """Whether the re-execution's result file says it held for the whole log (a rerun repeats a failed, missing or
    older one; a stretch's, --to-record or --from-checkpoint, is a file of its own and never counts)."""
    try:
        rx = Reexecution.load(Path(path).parent)
    except DataError:
        return False
    return rx is not None and rx.held_for_the_whole_log


def queue_stage(out, data_dir, clock):
    return run_queue_stage(out / "queue", data_dir, clock.keep)


def queue_study_stage(out, data_dir, clock):
    return run_queue_study_stage(out / "queue_study", data_dir, clock.keep)


def run_queue_study_stage(sdir, data_dir, on_skip=lambda: None):
    from shardqueue.study.run import run_study

    if (sdir / "report.md").exists():
        print(f"already done ({sdir / 'report.md'})")
        on_skip()
        return 0
    return run_study(argparse.Namespace(preset="tiny", out=str(sdir), data_dir=data_dir, dry_run=False, curve=False,
                                        calibration=None, device=None))


# stage -> (what its header says, what runs it)
STAGE_RUNS = {
    "prepare": ("offline corpus", prepare_stage),
    "audit": ("four packers, scaled budget", audit_stage),
    "train": ("six tiny configs on CPU", train_stage),
    "freeze": ("protocol and checkpoint manifest", freeze_stage),
    "eval": ("windows, bins, bootstrap, confirmation, rankings", eval_stage),
    "queue": ("calibrate, run with a known-bad source, reconstruct, re-execute", queue_stage),
    "queue_study": ("arms A/B/C x two seeds, adoption rule", queue_study_stage),
    "summary": ("findings beside the paper's values", summary_stage),
}

if __name__ == "__main__":
    sys.exit(main())
