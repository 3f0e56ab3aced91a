#!/usr/bin/env python3
"""Benchmark: full-budget audit replay on a paper-shaped synthetic census.

846,848 sources, 631,241,817 tokens, longest 290,219, at the paper's 499,646,464 targets
(R = 2049, B = 1000), through the selection core with event records; against the
literal list-scanning reference (checkers/packing_checker.py) on a prefix of the same
stream. Prints selection events per second and their ratio.

  python audit/bench.py [--packer original] [--ref-rows 400]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from audit.replay import PAPER_TARGETS, Replay, rows_for_targets  # noqa: E402
from audit.synthetic import paper_like_lengths  # noqa: E402
from checkers.packing_checker import replay as reference_replay  # noqa: E402
from loaders.stream import DocumentStream  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packer", default="original")
    ap.add_argument("--ref-rows", type=int, default=400, help="rows replayed by the reference")
    args = ap.parse_args()
    lengths = paper_like_lengths()
    stream = DocumentStream.from_lengths(lengths, name="synthetic")
    rows = rows_for_targets(PAPER_TARGETS, 2049)
    t = time.perf_counter()
    rep = Replay(stream, args.packer, rows, 2049, 1000)
    dt = time.perf_counter() - t
    n_ev = len(rep.events)
    print(f"full budget: {rows:,} rows, {n_ev:,} selection events, {rep.core.arrived_docs:,} arrivals in {dt:.2f}s "
          f"({n_ev / dt:,.0f} events/s, one core)")
    refills = [lengths[i:i + 128].tolist() for i in range(0, len(lengths), 128)]
    t = time.perf_counter()
    ev, _ = reference_replay(refills, args.packer, 2049, 1000, args.ref_rows)
    rt = time.perf_counter() - t
    assert [tuple(e[:4]) for e in ev] == [tuple(e[:4]) for e in rep.raw[:len(ev)]], "reference disagrees"
    print(f"reference: {args.ref_rows} rows, {len(ev):,} events in {rt:.2f}s ({len(ev) / rt:,.0f} events/s)")
    print(f"ratio fast/reference (events/s): {(n_ev / dt) / (len(ev) / rt):,.0f}x")


if __name__ == "__main__":
    main()
