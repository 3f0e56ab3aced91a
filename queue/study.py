#!/usr/bin/env python3
"""The queue experiment of the proposal "Can a model help choose its next training data?".

  python queue/study.py --preset tiny --out runs/queue_study        # the CPU smoke test the main job runs
  python queue/study.py --preset small --out runs/queue_study_small # the CPU study at small scale, two seeds (~25 min)
  python queue/study.py --preset planned --out runs/queue_study_planned --workers 2
                                                                    # small, with the seeds stage A plans
  python queue/study.py --preset proxy64m --dry-run                 # the 64M plan: GPU-hours, data, disk, memory
  python queue/study.py --preset proxy64m --out runs/study64m [--curve]   # on GPUs with ClimbMix prepared
  python queue/study.py --preset planned --out runs/queue_study_planned --engine ray [--ray-address HOST:PORT]
                                                                    # the runs as Ray tasks: a local Ray or a cluster

Stage A calibrates the rule once (one homogeneous source) and is shared by all arms. From its
noise (sigma_d, the slope of its losses) the study prints, before any arm trains, how many
seeds per arm a 95% interval of B - A narrower than the proposal's 0.6-point floor needs; the
preset runs that many (at most its max_seeds), or its own seeds (the proposal's two) when it
plans none. Stage B runs three arms at the same trained-target budget from the same
candidate pool and frozen rotation manifest; each ends with the same final decay (the
same number of updates) on shards its own policy accepted:
  A  the eligible pool in plain seeded order, no measurement-driven decisions; it also
     provides the reference curve of the selection axis (decay branches spaced in log D,
     continuing until the curve covers every arm's final loss, up to the preset's cap);
  B  the queue (basic rule; --curve: the curve-guided residual rule when the reference
     curves pass the identifiability check);
  C  random rejection: as many rejections as B made at the same seed, same rollback/deferral
     mechanics.
Every arm is scored on the selection set only after its decay; efficiency points against the
reference curve of arm A's other seeds (leave one out) feed the proposal's rule: adopt only if
B beats A and C by more than max(0.6, 2 x seed spread) points. Beside it, the paired mean
differences B - A and B - C with 95% t intervals. The verdict is "adopted within this tested
setting", "not adopted" (the data say a gain is under the threshold), "unresolved" (they cannot
say) or "not measurable" (with the reason). The report gives compute per arm and B's overhead.

Writes OUT/summary.json, OUT/report.md, four figures (selection, control_b, screen_vs_rise,
compute), OUT/decisions_B.parquet (+ .csv) and one folder per run. A finished run is not
redone; one made under another run plan (the first command without --curve, this one with it)
is refused in one line rather than reported as this command's.
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: shardqueue, corpus, training

from console.shutdown import skip_final_collections  # noqa: E402
from errors import DataError  # noqa: E402
from fanout import add_engine_args, check_engine  # noqa: E402
from shardqueue.study.presets import PRESETS, format_plan, plan  # noqa: E402

# Late imports: the study itself (shardqueue.study.run, whose corpus reading --dry-run --source uses) and the memory
# footprint load torch and the queue; main() imports them after parsing, so `--help` answers without them


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny", help="setting (default tiny)")
    ap.add_argument("--out", default="runs/queue_study",
                    help="results folder (default runs/queue_study): a new or empty one, or an earlier study's")
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--source", default=None, choices=("stdlib", "climbmix", "parquet"),
                    help="prepared corpus to run on instead of the preset's (e.g. parquet: prepare.py --source "
                         "parquet); with --dry-run, the plan is of the model that corpus gives (its vocabulary)")
    ap.add_argument("--domains", default=None, metavar="FILE",
                    help="control and selection domains from a JSON file (see shardqueue/world/domains.py)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print each arm's planned shards, targets, updates, FLOPs; with --source, whether the "
                         "prepared corpus holds what stage A draws (status 2 where it does not)")
    ap.add_argument("--curve", action="store_true",
                    help="arm B uses the curve-guided residual rule (if the reference curves are identifiable)")
    ap.add_argument("--calibration", default=None,
                    help="an existing stage-A folder of this preset to reuse (default: OUT/stage_a, made if missing)")
    ap.add_argument("--workers", type=int, default=1, metavar="N",
                    help="run N seeds side by side in their own processes (each run is single-threaded: on 2 cores, "
                         "--workers 2 halves the wall time; the results are the same as with 1); the local engine's: "
                         "--engine ray runs as many side by side as its cluster, or this machine, has cores")
    add_engine_args(ap, "seeds' runs")
    ap.add_argument("--device", default=None, help="torch device: auto (cuda when available, else cpu), cpu, cuda or cuda:N")
    return ap.parse_args(argv)


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    a = parse(argv)
    try:  # --dry-run too: a plan printed for options the run would refuse reads as a plan that would run
        check_engine(a.engine, a.workers, a.ray_address)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.dry_run:
        return dry_run(a)
    from shardqueue.study.run import run_study

    out = Path(a.out)
    try:
        check_out(a, out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    made = not out.exists()
    rc = run_study(a)
    if rc and made:  # a study refused (or stopped) before it wrote a file leaves no folder of its own making
        remove_empty_folders(out)
    return rc


def check_out(a, out):
    """What the study would write over or read wrongly, refused before its folder is made: --out holding files
    that are not an earlier study's (shardqueue/out_folder.py STUDY), and a data folder without the corpus asked for."""
    # late: the queue's modules load torch, which --help and a --dry-run of a preset's own corpus do without
    from shardqueue.calibration import check_prepared
    from shardqueue.out_folder import STUDY, refuse_foreign_files
    from shardqueue.study.run import calibration_dir, data_root
    from shardqueue.world.domains import load_domains
    from training.device import resolve_device

    refuse_foreign_files(out, (STUDY,), "the study")
    # the study's own first checks, in its order (run_study), so that a bad --device or --domains file is named
    # before the corpus, whatever the data
    resolve_device(a.device or "auto", "--device")
    if a.domains:
        load_domains(a.domains)
    if a.engine == "local":  # a Ray cluster's nodes read their own data root: the engine's probe checks it there
        check_prepared(data_root(a, calibration_dir(a, Path(os.path.abspath(out)))), a.source or
                       PRESETS[a.preset].source, "--source {}")


def remove_empty_folders(out):
    """out and the folders under it, where they hold nothing (deepest first); a file keeps its folders."""
    for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()


def dry_run(a):
    """The plan, printed. With --source, of the model a run would train: the preset on that corpus, with its
    prepared tokenizer's vocabulary (read from prepared.json), and whether the corpus holds what stage A draws (read
    from its lengths and labels: sizes_line)."""
    setting = None
    if a.source:
        from shardqueue.calibration import check_prepared
        from shardqueue.study.run import calibration_dir, data_root, with_corpus_vocab

        try:
            data = data_root(a, calibration_dir(a, Path(os.path.abspath(a.out))))
            check_prepared(data, a.source, "--source {}")
            setting = with_corpus_vocab(PRESETS[a.preset].with_source(a.source), data, print)
        except DataError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    pl = plan(a.preset, setting)
    print(format_plan(pl))
    if pl.get("node"):  # a GPU plan: peak host memory and disk against the stated node
        from shardqueue.study.footprint import format_footprint, host_footprint

        print(format_footprint(host_footprint(a.preset)))
    return sizes_line(data, setting) if setting is not None else 0


def sizes_line(data, setting):
    """With --source: whether stage A's source holds what its calibration draws, read from the prepared corpus's
    lengths and labels under the data root `data`: the run's first refusal of a corpus too small (before, the plan
    was printed with status 0 and the run refused the corpus); status 2 where it does not. A corpus labelled by each
    document's register (read from every text) is checked at the run."""
    # late: the queue's modules load torch, which a --dry-run of a preset's own corpus does without
    from shardqueue.calibration import calibration_need, calibration_shortfall, corpus_sizes
    from shardqueue.study.presets import queue_settings

    s = queue_settings(setting)
    sizes = corpus_sizes(data, setting.source, s)
    if sizes is None:
        print("sizes: checked at the run (this corpus's labels are each document's register, read from every text)")
        return 0
    short = calibration_shortfall(sizes, s, exact=False)
    if short:
        print(f"error: {short}", file=sys.stderr)
        return 2
    print(f"sizes: stage A's source {sizes['source']!r} holds {sizes['tokens']:,} tokens in documents of at most half "
          f"a shard, its calibration draws {calibration_need(s):,}; the pool's other shards, and the copies of "
          "validation texts it leaves out, are checked at the run")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
