#!/usr/bin/env python3
"""Benchmark: rows/s and tokens/s of each packer (the compiled core and its token copy) against the
literal reference (loaders/reference.py ReferencePacker: the pinned upstream loop's list scan, rows
and all).

Both run on the same stream (the prepared offline corpus by default; R = 2049, B = 1000).
The reference scans its buffer list on every selection, so it gets fewer rows; the ratio
compares rates measured in this same run, on the same rows. The goal: at least 100x for
every packer. The compiled code is loaded (or compiled) before anything is timed.

  python loaders/bench.py [--data-dir DIR] [--rows 2000] [--ref-rows 60]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpus.layout import default_data_dir  # noqa: E402
from errors import DataError  # noqa: E402
from loaders.core import PACKERS  # noqa: E402
from loaders.packers import Packer  # noqa: E402
from loaders.reference import ReferencePacker  # noqa: E402
from loaders.stream import open_split  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="data root with a prepared stdlib corpus")
    ap.add_argument("--source", default="stdlib")
    ap.add_argument("--rows", type=int, default=2000, help="rows for the fast packers")
    ap.add_argument("--ref-rows", type=int, default=200, help="rows for the same-work comparison")
    args = ap.parse_args(argv)
    try:
        for flag, v in (("--rows", args.rows), ("--ref-rows", args.ref_rows)):
            if v < 1:
                raise DataError(f"{flag} {v}: must be at least 1")
        stream = open_split(args.data_dir or default_data_dir(), args.source, "train")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    docs = [stream.doc_tokens(i).tolist() for i in range(stream.n)]
    R, B = 2049, 1000
    print(f"stream: {stream.n:,} documents, R={R}, B={B}")
    print(f"{'packer':<14} {'rows/s':>10} {'tokens/s':>12} {'same rows: fast/ref':>20}")
    ratios = []
    for name in PACKERS:
        Packer(stream, name, R, B).next_rows(1)  # the machine code loaded (compiled on a machine's first run)
        # long run: throughput of the fast packer, tokens materialized
        p = Packer(stream, name, R, B)
        t = time.perf_counter()
        p.next_rows(args.rows)
        fast = args.rows / (time.perf_counter() - t)
        # identical work: the first ref_rows rows from both (fast: best of 5 fresh runs)
        best = float("inf")
        for _ in range(5):
            p = Packer(stream, name, R, B)
            t = time.perf_counter()
            p.next_rows(args.ref_rows)
            best = min(best, time.perf_counter() - t)
        ref = ReferencePacker(docs, stream.refills.tolist(), name, R, B, bos=stream.bos)
        t = time.perf_counter()
        ref.next_rows(args.ref_rows)
        slow = time.perf_counter() - t
        print(f"{name:<14} {fast:>10,.0f} {fast * R:>12,.0f} {slow / best:>19.1f}x")
        ratios.append(slow / best)
    print(f"goal: every packer at least {GOAL:g}x the literal reference on the same rows: lowest {min(ratios):.0f}x: "
          f"{'holds' if min(ratios) >= GOAL else 'MISSED'}")
    return 0


GOAL = 100.0


if __name__ == "__main__":
    sys.exit(main())
