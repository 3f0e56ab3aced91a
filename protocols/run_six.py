#!/usr/bin/env python3
"""Train and score the six configs in turn; print the section 5.3-style table.

  python -m protocols.run_six --preset tiny [--data-dir DIR] [--out runs/six]

A finished run (its summary.json exists) is not trained again; an interrupted one
resumes from its newest good checkpoint.
"""
import argparse
import json
import sys
from pathlib import Path

from corpus.atomic import atomic_write_json, atomic_write_text
from protocols.generate_configs import configs


def table(results) -> str:
    lines = ["| Condition | Seed | Official BPB | CE | Perplexity | Timed s | Total s | Peak MiB (GPU alloc. / CPU RSS) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        o = r["official"]
        cond = r["name"].rsplit("_s", 1)[0]
        lines.append(f"| {cond} | {r['seed']} | {o['bpb']:.8f} | {o['ce']:.8f} | {o['perplexity']:.5f} | "
                     f"{r['training_seconds']:.3f} | {r['total_seconds']:.3f} | {r['peak_memory_mib']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    from train import train
    from training.config import resolve_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=["tiny", "paper"])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="runs/six")
    ap.add_argument("overrides", nargs="*", help="key=value overrides applied to all six")
    a = ap.parse_args(argv)
    out = Path(a.out)
    results = []
    for c in configs(a.preset):
        run_dir = out / c["name"]
        done = run_dir / "summary.json"
        if done.exists():
            results.append(json.loads(done.read_text()))
            print(f"{c['name']}: already done ({done})")
            continue
        ov = [f"{k}={v}" for k, v in c.items()] + ([f"data_dir={a.data_dir}"] if a.data_dir else []) + a.overrides
        cfg = resolve_config(None, ov)
        res = train(cfg, run_dir, resume=True, log=print)
        results.append(res)
    md = table(results)
    atomic_write_text(out / "table.md", md)
    atomic_write_json(out / "results.json", results)
    print("\n" + md)
    print(f"wrote {out}/table.md and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
