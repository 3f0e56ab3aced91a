#!/usr/bin/env python3
"""Train and score the six configs in turn; print the section 5.3-style table.

  python -m comparison.run_six --preset tiny [--data-dir DIR] [--out runs/six]
  python -m comparison.run_six --preset paper --engine ray [--ray-address HOST:PORT] device=cuda
                                          # the six as Ray tasks side by side, each holding its GPU

Each run prints its resolved configuration when it starts and its official BPB line when
it ends. A finished run (its summary.json exists) is not trained again; an interrupted one
resumes from its newest good checkpoint. Writes OUT/table.md (with the runs' model size,
updates, targets and context in its header), OUT/results.json, OUT/regime.json (the runs'
regime indicators and what the demo's source-length filter drops), OUT/learning_curves.png
(validation BPB on the first 2 official batches, the same rows every time, from each run's
train_log.jsonl: a part of the official score's rows, so not its level; all runs on shared
axes, and the difference from the same-seed baseline) and OUT/bpb_by_condition.png.
"""
import argparse
import os
import sys
from pathlib import Path

from audit.regime import filter_counts, preset_setting, preset_stream, regime_indicators, regime_table_md
from console.shutdown import skip_final_collections
from console.terminal import for_terminal
from console.usage import interrupted_line, prog_name
from corpus.atomic import atomic_write_json, atomic_write_text
from corpus.layout import default_data_dir
from errors import DataError
from fanout import Task, TaskFailed, add_engine_args, gpus_for, open_engine
from findings import PAPER
from presets.six import configs, defining_keys

# Late imports: train.py and the training core load torch, the figures matplotlib; the functions that use them
# import them, so `--help` answers without them

CURVES = "learning_curves.png"
BPB_FIGURE = "bpb_by_condition.png"


def condition(r):
    return r["name"].rsplit("_s", 1)[0]


def fmt_tps(r):
    t = r.get("tokens_per_second")
    return f"{t:,.0f}" if t else "-"


def table(results) -> str:
    from comparison.figures import BPB_NOTE, learning_curves_note
    from train import CURVE_BATCHES

    r0 = results[0]
    c = r0["config"]
    same = all(r["parameters"] == r0["parameters"] and r["updates"] == r0["updates"] for r in results)
    head = (f"Section 5.3: {len(results)} runs of a {c['depth']}-layer, width-{c['width']} decoder with "
            f"{r0['parameters']:,} parameters{'' if same else ' (sizes differ between runs!)'}; "
            f"{r0['updates']:,} updates of {c['micro_rows'] * c['accum'] * c['context']:,} targets "
            f"({c['micro_rows']} rows x {c['accum']} accumulation steps x context {c['context']:,}) = "
            f"{r0['targets']:,} training targets per run; official metric on "
            f"{r0['official']['eval_targets']:,} validation targets.\n\n"
            "Timed s: update time without the first 11 updates of each process (compilation and warm-up), "
            "as the baseline's training time; Total s: the whole run, evaluation included. Tokens/s: training "
            "targets per timed second (machine load shows here, not as a method effect).\n\n"
            f"![learning curves]({CURVES})\n\n{learning_curves_note(results, CURVE_BATCHES)}\n\n"
            f"![BPB by condition]({BPB_FIGURE})\n\n{BPB_NOTE}\n\n")
    lines = ["| Condition | Seed | Official BPB | CE | Perplexity | Timed s | Total s | Tokens/s | "
             "Peak MiB (GPU alloc. / CPU RSS) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        o = r["official"]
        lines.append(f"| {condition(r)} | {r['seed']} | {o['bpb']:.8f} | {o['ce']:.8f} | {o['perplexity']:.5f} | "
                     f"{r['training_seconds']:.3f} | {r['total_seconds']:.3f} | {fmt_tps(r)} | "
                     f"{r['peak_memory_mib']:.2f} |")
    return head + "\n".join(lines) + "\n"


def regime_record(cfg: dict) -> dict:
    """The regime indicators of the runs' training setting (the audit's exact replay) and, when the demo
    filters long sources out, how much it drops: written to regime.json for the findings page."""
    data_dir = cfg.get("data_dir") or default_data_dir()
    R, B, T = preset_setting(cfg)
    rec = {"row_capacity": R, "buffer": B, "targets": T, "eval_buffer": cfg.get("eval_buffer", 1000),
           "indicators": regime_indicators(preset_stream(data_dir, cfg), R, B, T), "filter": None}
    if cfg.get("max_source_len"):  # a filter, not a crop: longer sources are dropped whole (counts from the corpus)
        rec["filter"] = filter_counts(data_dir, cfg.get("source", "stdlib"), cfg["max_source_len"])
    return rec


def regime_md(rec: dict) -> str:
    """The regime indicators beside the paper's."""
    fc = rec["filter"]
    cap = (f", with training sources longer than {fc['max_source_len']:,} tokens filtered out for this demo "
           f"({fc['dropped']:,} of {fc['sources']:,} sources, {100 * fc['dropped_token_share']:.1f}% of training "
           f"tokens; evaluation sees every source)") if fc else ""
    return (f"\n## Regime of these runs against the paper's\n\nThe packing effects depend on ratios, not sizes. These "
            f"runs train at R = {rec['row_capacity']:,}, B = {rec['buffer']:,} and {rec['targets']:,} targets{cap}; the "
            f"official metric packs its stream at B = {rec['eval_buffer']:,}, as the paper's does.\n\n"
            + regime_table_md({"these runs": rec["indicators"]}))


def train_config(cfg, run_dir):
    """One config trained and scored (a fan-out task: in this process, or on a Ray worker)."""
    # the module, not its function: tests stand a killed run in for train.train
    import train

    return train.train(cfg, run_dir, resume=True, log=print, curve_points=train.CURVE_POINTS, collect_garbage=True)


def check_overrides(preset, overrides):
    """An override is applied to all six: one of the keys the six differ by would make them one run under six
    names (loader=lossless: every row labelled baseline / random_crop / segmented trained lossless)."""
    defining = defining_keys(preset)
    for ov in overrides:
        k = ov.split("=", 1)[0].strip()
        if k in defining:
            raise DataError(f"override {ov!r}: the six runs differ by {', '.join(defining)}, and an override applies "
                            f"to all six; to train one run otherwise: python train.py --config "
                            f"protocols/configs/{preset}/NAME.json {ov}")


def config_tasks(a, out):
    """The six configs resolved here, each a task holding the GPU its world of one process trains on."""
    from training.config import resolve_config

    check_overrides(a.preset, a.overrides)
    tasks = []
    # the data root resolved here, absolute, and passed with every config: a run on a Ray node reads the
    # driver's corpus, never its own PACKAUDIT_DATA or a path relative to its own folder
    data = [f"data_dir={os.path.abspath(a.data_dir or default_data_dir())}"]
    extra = [f"data_dir={os.path.abspath(o[len('data_dir='):])}" if o.startswith("data_dir=") else o for o in a.overrides]
    for c in configs(a.preset):
        try:
            cfg = resolve_config(None, [f"{k}={v}" for k, v in c.items()] + data + extra)
        except DataError as e:
            raise DataError(f"{c['name']}: {e}") from None
        tasks.append(Task(train_config, (cfg, out / c["name"]), name=c["name"], cpus=1, gpus=gpus_for(cfg.device),
                          reads=(cfg.data_dir,), prepared=(os.path.join(cfg.data_dir, cfg.source),),
                          writes=(str(out),), kept="its run folder's summary.json in --out"))
    return tasks


def train_all(a, out):
    """Every config's result in order, printing each one's line as it comes back; a finished run is read
    back, not trained again. The driver checks it sees each run's summary.json (a Ray worker wrote it)."""
    import train
    from training.trainer import TrainingDiverged

    tasks = config_tasks(a, out)
    results = []
    with open_engine(a.engine, 1, a.ray_address, a.verbose) as engine:
        got = engine.run(tasks)
        for t in tasks:
            try:
                res = next(got)
            except TaskFailed:  # names the run already
                raise
            except (DataError, TrainingDiverged) as e:
                raise DataError(f"{t.name}: {e}") from None
            done = t.args[1] / "summary.json"
            if not done.exists():
                raise DataError(f"{done}: written by a worker but not visible to the driver: --out must be on "
                                "storage that every node shares")
            print(train.result_line(res), flush=True)
            results.append(res)
    return results, [t.args[1] for t in tasks]


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(prog=prog_name("python -m comparison.run_six"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=["tiny", "paper"], help="config sizes (default tiny)")
    ap.add_argument("--data-dir", default=None, help="prepared data root (default: the usual data folder)")
    ap.add_argument("--out", default="runs/six", help="output folder, one subfolder per run (default runs/six)")
    add_engine_args(ap, "six runs")
    ap.add_argument("overrides", nargs="*", help="key=value overrides applied to all six (not name, loader or seed: "
                                                 "what the six differ by)")
    a = ap.parse_args(argv)
    import train
    from comparison.figures import bpb_by_condition, learning_curves

    out = Path(os.path.abspath(a.out))  # absolute: each run writes its folder there, on whichever node it runs
    try:
        results, run_dirs = train_all(a, out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a finished run is skipped on a rerun, one stopped mid-way resumes from its checkpoint
        print(interrupted_line("python -m comparison.run_six", argv, f"the runs in {out} are kept, each finished or "
                               "with its checkpoints"), file=sys.stderr)
        return 130
    regime = regime_record(results[0]["config"])
    md = table(results) + regime_md(regime)
    atomic_write_text(out / "table.md", md)
    atomic_write_json(out / "results.json", results)
    atomic_write_json(out / "regime.json", regime)
    learning_curves(run_dirs, results, out / CURVES, train.CURVE_BATCHES)
    bpb_by_condition(results, PAPER["s5_3_official_bpb"], out / BPB_FIGURE)
    print("\n" + for_terminal(md))
    print(f"wrote {out}/table.md, results.json, regime.json, {CURVES} and {BPB_FIGURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
