#!/usr/bin/env python3
"""Benchmark: a tiny CPU training run with freed host memory kept and huge pages for large
tensors (what configure("cpu") does, training/device.py) against glibc's and torch's
defaults, under which every allocation over 32 MB is mapped afresh.

Each side is the same train.py command in its own process, run --repeats times in turn. The
reference sets THP_MEM_ALLOC_ENABLE=0, a user's choice that configure then leaves alone,
so nothing is changed. Prints wall seconds, system seconds and peak RSS per side (medians)
and their ratios to the reference, and checks that every run ends at the same official BPB
(the settings move no number).

  python training/bench.py [--data-dir DIR] [--config protocols/configs/tiny/baseline_s43.json]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


SIDES = {"reference": {"THP_MEM_ALLOC_ENABLE": "0"},  # the defaults: configure("cpu") changes nothing
         "heap kept + huge pages": {}}  # what every command line does on CPU


def one_run(config, data_dir, out, side):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "THP_MEM_ALLOC"))}
    env.update(SIDES[side])
    cmd = [sys.executable, str(ROOT / "train.py"), "--config", config, "--out", str(out), "--overwrite"]
    if data_dir:
        cmd.append(f"data_dir={data_dir}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(f"error: train.py failed: {r.stderr.strip().splitlines()[-1:]}")
    # ru_maxrss of children is the largest of any child so far: read the run's own peak instead
    summary = json.loads((Path(out) / "summary.json").read_text())
    return {"wall": wall, "sys": after.ru_stime - before.ru_stime, "peak_mib": summary["peak_memory_mib"],
            "bpb": summary["official"]["bpb"]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python training/bench.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "protocols/configs/tiny/baseline_s43.json"))
    ap.add_argument("--data-dir", default=None, help="data root with a prepared stdlib corpus (default: the usual one)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    runs = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            for k, side in enumerate(SIDES):
                runs[side].append(one_run(a.config, a.data_dir, Path(tmp) / f"run_{k}_{i}", side))
    med = {side: {k: statistics.median(r[k] for r in rs) for k in ("wall", "sys", "peak_mib")} for side, rs in runs.items()}
    same = len({r["bpb"] for rs in runs.values() for r in rs}) == 1
    ref = med["reference"]
    print(f"{'':<26} {'wall s':>7} {'system s':>9} {'peak MiB':>9}   ratios to the reference: wall, system, peak")
    for side, m in med.items():
        print(f"{side:<26} {m['wall']:>7.1f} {m['sys']:>9.1f} {m['peak_mib']:>9.0f}   {m['wall'] / ref['wall']:.2f}, "
              f"{m['sys'] / max(ref['sys'], 1e-9):.2f}, {m['peak_mib'] / ref['peak_mib']:.2f}")
    print(f"official BPB equal on every run: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
