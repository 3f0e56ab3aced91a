#!/usr/bin/env python3
"""Benchmark: a tiny CPU training run with freed host memory kept (what configure("cpu") does,
training/device.py) against glibc's default, which maps every allocation over 32 MB afresh.

Each side is the same train.py command in its own process, run --repeats times in alternation;
the reference sets MALLOC_TRIM_THRESHOLD_ to glibc's default, which configure leaves alone.
Prints wall seconds, system seconds and peak RSS per side (medians) and their ratios, and
checks that both sides end at the same official BPB (the setting moves no number).

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


def one_run(config, data_dir, out, keep):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if not keep:
        env["MALLOC_TRIM_THRESHOLD_"] = "131072"  # glibc's default: configure("cpu") then changes nothing
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
    runs = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            for keep in (False, True):
                runs[keep].append(one_run(a.config, a.data_dir, Path(tmp) / f"run_{keep}_{i}", keep))
    med = {keep: {k: statistics.median(r[k] for r in rs) for k in ("wall", "sys", "peak_mib")} for keep, rs in runs.items()}
    same = len({r["bpb"] for rs in runs.values() for r in rs}) == 1
    print(f"{'':<28} {'wall s':>8} {'system s':>9} {'peak MiB':>9}")
    for keep, label in ((False, "glibc default (reference)"), (True, "freed memory kept")):
        m = med[keep]
        print(f"{label:<28} {m['wall']:>8.1f} {m['sys']:>9.1f} {m['peak_mib']:>9.0f}")
    print(f"{'kept / reference':<28} {med[True]['wall'] / med[False]['wall']:>8.2f} "
          f"{med[True]['sys'] / max(med[False]['sys'], 1e-9):>9.2f} {med[True]['peak_mib'] / med[False]['peak_mib']:>9.2f}")
    print(f"official BPB equal on every run: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
