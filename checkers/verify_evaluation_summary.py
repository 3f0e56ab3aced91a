#!/usr/bin/env python3
"""Recompute the prefix rankings and their subset intervals from the evidence file (numpy only).

  python checkers/verify_evaluation_summary.py runs/main/eval
  python checkers/verify_evaluation_summary.py RANKINGS.json EVIDENCE.npz

From the per-row sufficient statistics (nats, bytes) of every checkpoint: full and prefix
BPB, the orders, the reversals against the full order, and each method/prefix contrast's
nominal 95% interval over same-size uniform row subsets (same generator, seed and draw
order as stated). One line per check; exit 1 on any difference beyond 1e-9 or any
non-finite saved value, 2 on missing, unreadable, truncated or incomplete files.
"""
import json
import math
import os
import sys
import zipfile
import zlib

import numpy as np

TOL = 1e-9
# what a truncated, empty or malformed file raises somewhere in the checks: never a PASS, never a traceback
UNCHECKABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError, StopIteration,
               zipfile.BadZipFile, zlib.error)


def gap(x):
    """A difference as max() may use it: NaN (which max() would silently skip) becomes infinite."""
    x = float(x)
    return x if math.isfinite(x) else math.inf


def score(nats, nbytes):
    return nats.sum() / (math.log(2) * nbytes.sum())


def ranked(d):
    return sorted(d, key=lambda m: (d[m], m))


USAGE = "give an eval folder, or RANKINGS.json EVIDENCE.npz (--help for more)"


def usage_problem(args):  # its twin in the other verify_ checker: each runs alone, importing no sibling
    """One line for arguments that are neither an eval folder nor a rankings and evidence pair."""
    if len(args) == 1:
        why = "not a folder" if os.path.exists(args[0]) else "no such folder"
        return f"{args[0]}: {why}; {USAGE}"
    return f"{len(args) or 'no'} arguments; {USAGE}"


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    try:
        return _main(args)
    except UNCHECKABLE as e:
        print(f"error: cannot be checked ({type(e).__name__}: {e}); a truncated or incomplete file?", file=sys.stderr)
        return 2


def _main(args):
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    if len(args) == 1 and os.path.isdir(args[0]):
        args = [os.path.join(args[0], "rankings.json"), os.path.join(args[0], "ranking_evidence.npz")]
    if len(args) != 2:
        print(f"error: {usage_problem(args)}", file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            saved = json.load(f)
        if not isinstance(saved, dict):
            raise ValueError(f"{args[0]} holds a {type(saved).__name__}, not a rankings object")
        if saved.get("skipped"):
            print(f"PASS  {args[0]}: no ranking was made (reference or ranked set absent), nothing to recompute")
            return 0
        z = np.load(args[1], allow_pickle=False)
    except FileNotFoundError as e:  # a missing file is named, as the confirmation checker names it
        print(f"error: {e.filename}: no such file; {USAGE}", file=sys.stderr)
        return 2
    except UNCHECKABLE as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    nats, nbytes = z["nats"], z["bytes"]
    names, ref = [str(x) for x in z["names"]], str(z["reference"])
    results = []

    def check(name, good):
        results.append(bool(good))
        print(f"{'PASS' if good else 'FAIL'}  {name}")

    check("methods and reference agree", names == saved["methods"] and ref == saved["reference"])
    check("bytes are whole and non-negative", nbytes.dtype.kind in "iu" and nbytes.min() >= 0)
    full = {m: score(nats[i], nbytes[i]) for i, m in enumerate(names)}
    check("full-stream BPB of every method", all(gap(abs(full[m] - saved["full"][m])) <= TOL for m in names))
    full_order = ranked(full)
    check("full order", full_order == saved["full_order"])
    rng = np.random.default_rng(saved["seed"])
    r = names.index(ref)
    n = nats.shape[1]
    worst = 0.0
    for rows, sp in zip([int(x) for x in z["prefixes"]], saved["prefixes"]):
        pre = {m: score(nats[i, :rows], nbytes[i, :rows]) for i, m in enumerate(names)}
        po = ranked(pre)
        rev = [[a, b] for i, a in enumerate(full_order) for b in full_order[i + 1:] if po.index(a) > po.index(b)]
        check(f"prefix of {rows} rows: scores, order and {len(rev)} reversals",
              rows == sp["rows"] and po == sp["order"] and rev == sp["reversals"]
              and all(gap(abs(pre[m] - sp["scores"][m])) <= TOL for m in names))
        sub = np.stack([rng.choice(n, size=rows, replace=False) for _ in range(saved["subsets"])])
        cs = iter(sp["contrasts"])
        for i, m in enumerate(names):
            if i == r:
                continue
            c = next(cs)
            d_sub = (nats[i][sub].sum(1) / (math.log(2) * nbytes[i][sub].sum(1))
                     - nats[r][sub].sum(1) / (math.log(2) * nbytes[r][sub].sum(1)))
            lo, hi = np.quantile(d_sub, [0.025, 0.975])
            d = pre[m] - pre[ref]
            worst = max(worst, gap(abs(lo - c["interval95"][0])), gap(abs(hi - c["interval95"][1])),
                        gap(abs(d - c["delta"])))
            if c["method"] != m or c["outside"] != bool(d < lo or d > hi):
                worst = math.inf
    held = worst <= TOL  # the line states the comparison that was made: "<=" when it held, ">" when it failed
    check(f"contrast deltas, subset intervals and outside flags (largest difference {worst:.2e} "
          f"{'<=' if held else '>'} {TOL})", held)
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
