#!/usr/bin/env python3
"""Write the paper's six training configs (or CPU-sized versions of the same six).

  python protocols/generate_configs.py [--preset paper|tiny] [--out protocols/configs/paper]

Conditions: baseline (original packer), random_crop (random spans), segmented
(segment-first), each at model seeds 43 and 44. The paper preset is 953 updates of
64 rows x 2048 targets x 4 accumulation steps; the tiny preset changes only sizes
(model, context, rows, updates, evaluation length), nothing about packing or the seeds.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpus.atomic import atomic_write_json  # noqa: E402

CONDITIONS = (("baseline", "original"), ("random_crop", "random_span"), ("segmented", "segment_first"))
SEEDS = (43, 44)
PRESETS = {
    "paper": {"source": "climbmix"},
    "tiny": {"source": "stdlib", "depth": 2, "width": 64, "heads": 2, "kv_heads": 2, "context": 128,
             "short_window": 64, "micro_rows": 8, "accum": 2, "updates": 40, "eval_batches": 16, "eval_rows": 8},
}


def configs(preset):
    out = []
    for cond, loader in CONDITIONS:
        for seed in SEEDS:
            out.append({"name": f"{cond}_s{seed}", "loader": loader, "seed": seed, **PRESETS[preset]})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    ap.add_argument("--out", default=None, help="folder (default protocols/configs/<preset>)")
    a = ap.parse_args(argv)
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", a.preset)
    for c in configs(a.preset):
        atomic_write_json(os.path.join(out, f"{c['name']}.json"), c)
        print(os.path.join(out, f"{c['name']}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
