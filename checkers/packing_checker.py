#!/usr/bin/env python3
"""Independent packing checker, standard library only (runs as `python3 -I -S`).

Its own literal, unsorted implementations of the four packers over length streams: the
buffer is a list scanned on every selection, exactly as SPEC.md's prose reads.

  python3 -I -S checkers/packing_checker.py --self-test
  python3 -I -S checkers/packing_checker.py --events runs/audit/events_original.csv \\
      --lengths runs/audit/stream_lengths.txt --packer original [--row-capacity 2049 --buffer 1000]

--lengths holds one refill batch per line (space-separated BOS-inclusive lengths), one pass
of the stream; the stream repeats. Events are compared field by field, row by row.
"""
import argparse
import csv
import math
import random
import sys

PACKERS = ("original", "lossless", "segment_first", "random_span")
RANDOM_SPAN_SEED = 314159265
FIELDS = ("source_id", "span_start", "emitted", "discarded", "kind", "lead_bos")


def replay(refills, packer, R, B, n_rows, seed=RANDOM_SPAN_SEED):
    """Events (source_id, span_start, emitted, discarded, kind, lead_bos) of n_rows rows.

    Also returns the arrivals as (event_index_before_which, source_id, length) for checks.
    """
    n = sum(len(r) for r in refills)
    rng = random.Random(seed)
    buf = []  # [source_id, span_start, lead_bos, current_length]
    events, arrivals = [], []
    k = passes = 0
    for _ in range(n_rows):
        pos = 0
        while pos < R:
            while len(buf) < B:
                first = passes * n + sum(len(r) for r in refills[:k])
                for j, L in enumerate(refills[k]):
                    src = first + j
                    arrivals.append((len(events), src, L))
                    if packer == "segment_first" and L > R:
                        buf.append([src, 0, 0, R])
                        s = R
                        while s < L:
                            e = min(s + R - 1, L)
                            buf.append([src, s, 1, e - s + 1])
                            s = e
                    else:
                        buf.append([src, 0, 0, L])
                k += 1
                if k == len(refills):
                    k, passes = 0, passes + 1
            rem = R - pos
            best = None
            for i in range(len(buf)):
                if buf[i][3] <= rem and (best is None or buf[i][3] > buf[best][3]):
                    best = i
            if best is not None:
                src, start, lead, L = buf.pop(best)
                events.append((src, start, L, 0, "fit", lead))
                pos += L
                continue
            short = 0
            for i in range(1, len(buf)):
                if buf[i][3] < buf[short][3]:
                    short = i
            src, start, lead, L = buf[short]
            if packer == "lossless":
                buf[short] = [src, start + rem, 0, L - rem]
                events.append((src, start, rem, 0, "crop", lead))
            else:
                del buf[short]
                if packer == "random_span":
                    events.append((src, 1 + rng.randrange(L - rem + 1), rem, L - rem, "crop", 1))
                else:
                    events.append((src, start, rem, L - rem, "crop", lead))
            pos = R
    return events, arrivals


def protected_violation(events, arrivals, R, B):
    """First event that selects a source among the largest B-1 long keys arrived so far."""
    arrived, a = [], 0
    for e, ev in enumerate(events):
        while a < len(arrivals) and arrivals[a][0] <= e:
            arrived.append(arrivals[a])
            a += 1
        long_keys = sorted((L, src) for _, src, L in arrived if L > R)
        protected = {src for _, src in long_keys[len(long_keys) - (B - 1):]} if B > 1 else set()
        if ev[0] in protected:
            return e
    return None


def pass_bounds(counts_at_least, B):
    return [math.ceil(B / r) if r else None for r in counts_at_least]


# ---- self-test ---------------------------------------------------------------------
# Hand-worked: R=4, B=2, one pass of lengths [3, 5 | 2, 6] in two refills of two.
HAND = {
    "original": [(0, 0, 3, 0, "fit", 0), (2, 0, 1, 1, "crop", 0), (1, 0, 4, 1, "crop", 0),
                 (4, 0, 3, 0, "fit", 0), (5, 0, 1, 4, "crop", 0)],
    "lossless": [(0, 0, 3, 0, "fit", 0), (2, 0, 1, 0, "crop", 0), (2, 1, 1, 0, "fit", 0),
                 (1, 0, 3, 0, "crop", 0), (1, 3, 2, 0, "fit", 0), (4, 0, 2, 0, "crop", 0)],
    "segment_first": [(1, 0, 4, 0, "fit", 0), (0, 0, 3, 0, "fit", 0), (1, 4, 1, 1, "crop", 1),
                      (3, 0, 4, 0, "fit", 0)],
}
HAND_ROWS = {"original": 3, "lossless": 3, "segment_first": 3}


def self_test():
    checks = []

    def check(name, ok):
        checks.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name}")

    refills = [[3, 5], [2, 6]]
    for packer, want in HAND.items():
        got, _ = replay(refills, packer, 4, 2, HAND_ROWS[packer])
        check(f"hand-worked example, {packer}", got == want)
    o, _ = replay(refills, "original", 4, 2, 3)
    r, _ = replay(refills, "random_span", 4, 2, 3)
    same = all(a[0] == b[0] and a[2:5] == b[2:5] for a, b in zip(o, r)) and len(o) == len(r)
    valid = all(b[1] == 0 or 1 <= b[1] <= (refills[0] + refills[1])[b[0] % 4] - b[2] + 1 for b in r)
    check("random spans: same sources, lengths and rules as original; starts in range", same and valid)
    rng = random.Random(7)
    for packer in ("original", "lossless"):
        ok = True
        for _ in range(60):
            R, B = rng.randint(2, 24), rng.randint(1, 12)
            lengths = [rng.choice([1, R // 2 + 1, R, R + 1, 2 * R, 3 * R + 1]) for _ in range(rng.randint(1, 30))]
            size = rng.randint(1, 6)
            refs = [lengths[i:i + size] for i in range(0, len(lengths), size)]
            ev, arr = replay(refs, packer, R, B, rng.randint(1, 25))
            ok &= protected_violation(ev, arr, R, B) is None
            # mass: everything emitted or discarded came from arrivals
            ok &= sum(e[2] + e[3] for e in ev) <= sum(a[2] for a in arr)
        check(f"Proposition on 60 seeded random streams, {packer}", ok)
    check("repeated-corpus bounds for the paper's census (2, 6, 26, 112, 1000)",
          pass_bounds([789, 196, 39, 9, 1], 1000) == [2, 6, 26, 112, 1000])
    # a small repeated corpus: one source longer than R among short ones, B = 5. Each pass
    # adds an occurrence with a larger key, so no occurrence can begin before the 5th arrival
    for packer in ("original", "lossless"):
        ev, arr = replay([[20, 2, 3]], packer, 8, 5, 60)
        e_first = next((i for i, e in enumerate(ev) if e[0] % 3 == 0), None)
        long_before = sum(1 for a in arr if a[2] > 8 and (e_first is None or a[0] <= e_first))
        check(f"repeated small corpus, {packer}: the long source begins only after its B-th arrival "
              f"(first served after {long_before} arrivals)", e_first is not None and long_before >= 5)
    print(f"{sum(checks)} passed, {len(checks) - sum(checks)} failed")
    return 0 if all(checks) else 1


def read_refills(path):
    with open(path) as f:
        return [[int(x) for x in line.split()] for line in f if line.strip()]


def compare(events_csv, lengths_path, packer, R, B):
    with open(events_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in FIELDS if rows and c not in rows[0]]
    if missing:
        print(f"error: {events_csv}: missing columns {', '.join(missing)}", file=sys.stderr)
        return 2
    total = sum(int(r["emitted"]) for r in rows)
    if total % R:
        print(f"error: {events_csv}: events fill {total} tokens, not whole rows of {R}", file=sys.stderr)
        return 2
    want, _ = replay(read_refills(lengths_path), packer, R, B, total // R)
    for i, (r, w) in enumerate(zip(rows, want)):
        got = (int(r["source_id"]), int(r["span_start"]), int(r["emitted"]), int(r["discarded"]), r["kind"], int(r["lead_bos"]))
        if got != w:
            print(f"MISMATCH at event {i}: file {got} != checker {w}")
            return 1
    if len(rows) != len(want):
        print(f"MISMATCH: file has {len(rows)} events, checker {len(want)}")
        return 1
    print(f"match: {len(rows)} events, {total // R} rows ({packer}, R={R}, B={B})")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="hand-worked examples, the Proposition, pass bounds")
    ap.add_argument("--events", help="events CSV exported by the audit")
    ap.add_argument("--lengths", help="stream lengths file: one refill batch per line")
    ap.add_argument("--packer", choices=PACKERS, default="original")
    ap.add_argument("--row-capacity", type=int, default=2049)
    ap.add_argument("--buffer", type=int, default=1000)
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not (a.events and a.lengths):
        ap.error("give --self-test, or both --events and --lengths")
    return compare(a.events, a.lengths, a.packer, a.row_capacity, a.buffer)


if __name__ == "__main__":
    sys.exit(main())
