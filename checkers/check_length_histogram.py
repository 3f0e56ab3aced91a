#!/usr/bin/env python3
"""Census checker, standard library only: source mass and repeated-corpus pass bounds.

  python3 -I -S checkers/check_length_histogram.py HIST.csv [--sources N --tokens T]
      [--buffer 1000] [--row-capacity 2049] [--thresholds 16384,32768,65536,131072]

HIST.csv has a header `length,count` (BOS-inclusive lengths). The table gives, for each
threshold l > R (the longest source is always added), the sources per pass of length >= l
and the earliest pass that can contain the first service of any of them: ceil(B / r).
These are necessary lower bounds (section 3), not service times.

A histogram cut short is refused, and so is a length or count beyond 64 bits (no census
writes one; a 400-digit length would only print a 400-digit table row): every line must be complete (newline-terminated), the
lengths strictly increasing as the census writes them, and the totals must equal the
declared --sources/--tokens or, when census.json lies beside SPLIT_length_histogram.csv,
the documents and tokens it records for SPLIT.
"""
import argparse
import csv
import json
import math
import os
import sys

SUFFIX = "_length_histogram.csv"
MAX_VALUE = 2**63 - 1  # lengths and counts as the census writes them: 64-bit integers


def read_histogram(path):
    with open(path, newline="") as f:
        text = f.read()
    if text and not text.endswith("\n"):
        raise ValueError(f"{path}: the last line is not complete (file cut mid-line?)")
    with open(path, newline="") as f:
        rd = csv.reader(f)
        header = next(rd, None)
        if header != ["length", "count"]:
            raise ValueError(f"{path}: header must be 'length,count', found {header!r}")
        hist = {}
        for i, row in enumerate(rd, start=2):
            if len(row) != 2:
                raise ValueError(f"{path}: line {i}: expected 2 fields")
            try:
                length, count = int(row[0]), int(row[1])
            except ValueError:
                raise ValueError(f"{path}: line {i}: length and count must be integers") from None
            if length < 1 or count < 0:
                raise ValueError(f"{path}: line {i}: length must be >= 1 and count >= 0")
            if length > MAX_VALUE or count > MAX_VALUE:
                raise ValueError(f"{path}: line {i}: {'length' if length > MAX_VALUE else 'count'} has "
                                 f"{len(str(max(length, count)))} digits; the census writes 64-bit integers")
            if hist and length <= max(hist):
                raise ValueError(f"{path}: line {i}: lengths must strictly increase (the census writes them sorted)")
            hist[length] = count
    if not hist:
        raise ValueError(f"{path}: no data rows after the header")
    if not any(hist.values()):
        raise ValueError(f"{path}: every count is 0 (no sources)")
    return hist


def census_totals(path):
    """(documents, tokens) that census.json beside the histogram records for its split, or None."""
    name = os.path.basename(path)
    census = os.path.join(os.path.dirname(os.path.abspath(path)), "census.json")
    if not name.endswith(SUFFIX) or not os.path.exists(census):
        return None
    split = name[: -len(SUFFIX)]
    try:
        with open(census) as f:
            rec = json.load(f)[split]
        return int(rec["documents"]), int(rec["tokens"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{census}: no usable totals for split {split!r} ({type(e).__name__})") from None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("histogram", help="length,count CSV (e.g. census/train_length_histogram.csv)")
    ap.add_argument("--sources", type=int, help="declared number of sources to check")
    ap.add_argument("--tokens", type=int, help="declared number of BOS-inclusive tokens to check")
    ap.add_argument("--buffer", type=int, default=1000, help="minimum buffered spans B (default 1000)")
    ap.add_argument("--row-capacity", type=int, default=2049, help="R (default 2049)")
    ap.add_argument("--thresholds", default="16384,32768,65536,131072", help="comma-separated length thresholds")
    a = ap.parse_args(argv)
    try:
        if a.buffer < 1:
            raise ValueError(f"--buffer {a.buffer}: must be at least 1")
        if a.row_capacity < 2:
            raise ValueError(f"--row-capacity {a.row_capacity}: must be at least 2")
        try:
            thresholds = [int(t) for t in a.thresholds.split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"--thresholds {a.thresholds!r}: expected comma-separated integers") from None
        hist = read_histogram(a.histogram)
        recorded = census_totals(a.histogram)
    except OSError as e:
        print(f"error: {a.histogram}: cannot read ({e.strerror})", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sources = sum(hist.values())
    tokens = sum(L * c for L, c in hist.items())
    longest = max((L for L, c in hist.items() if c), default=0)
    over = sum(c for L, c in hist.items() if L > a.row_capacity)
    print(f"sources {sources:,}  tokens {tokens:,}  longest {longest:,}  over R={a.row_capacity}: {over:,}")
    ok = True
    checks = [("declared", "sources", a.sources, sources), ("declared", "tokens", a.tokens, tokens)]
    if recorded is not None:
        checks += [("census.json", "sources", recorded[0], sources), ("census.json", "tokens", recorded[1], tokens)]
    for who, name, declared, got in checks:
        if declared is not None:
            good = declared == got
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}  {who} {name} {declared:,} {'==' if good else '!='} {got:,}")
    if a.sources is None and a.tokens is None and recorded is None:
        print("note: no declared or recorded totals: a histogram cut at a line boundary would go unnoticed")
    print(f"\n{'length at least':>16} {'sources per pass':>17} {'earliest possible pass':>23}   (B = {a.buffer})")
    for t in sorted({t for t in thresholds if t > a.row_capacity} | {longest}):
        r = sum(c for L, c in hist.items() if L >= t)
        bound = math.ceil(a.buffer / r) if r else None
        print(f"{t:>16,} {r:>17,} {bound if bound is not None else 'n/a':>23}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
