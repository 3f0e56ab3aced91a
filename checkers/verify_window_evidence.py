#!/usr/bin/env python3
"""Recompute every number of the source-window tables from the evidence file alone (numpy only).

  python checkers/verify_window_evidence.py runs/main/eval            # every window_summary_*.json there
  python checkers/verify_window_evidence.py SUMMARY.json EVIDENCE.npz

Checks, per cell (stratum x condition x seed): its sources, beginning and tail BPB deltas, the
interaction, the exploratory 95% and the Bonferroni-adjusted bootstrap intervals (same
generator, seed and draw order as stated in the evidence), the position-bin
contributions, that the bins add up to the window delta within 1e-7, and that bytes and
counted targets are whole non-negative numbers; per stratum, its sources and tail windows, and each window's
stratum against its source's length and the stated bounds; the text targets per checkpoint. Cells exist only for the (condition, seed)
pairs whose same-seed baseline was evaluated (the evidence lists them). Prints one line
per check; exits 1 on any difference beyond the tolerance or any non-finite saved value,
2 on missing, unreadable, truncated or incomplete files, or on a summary and an evidence file of two populations
(the evidence names its population and stream fingerprint; files written before 2026-12-07 do not).
"""
import glob
import json
import math
import os
import sys
import zipfile
import zlib

import numpy as np

TOL = 1e-9
BIN_TOL = 1e-7
WHICH = ("population", "fingerprint")  # what the evidence says it is of (eval/compare.py write_evidence)


class Mismatched(Exception):
    """A summary and an evidence file of two populations: the arguments, not the evaluation, are wrong."""


# what a truncated, empty or malformed file raises somewhere in the checks: never a PASS, never a traceback
UNCHECKABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError, zipfile.BadZipFile,
               zlib.error)


def gap(x):
    """A difference as max() may use it: NaN (which max() would silently skip) becomes infinite."""
    x = float(x)
    return x if math.isfinite(x) else math.inf


def recompute(ev, p):
    rng = np.random.default_rng(p["seed"])
    contrasts = {tuple(c) for c in p["contrasts"]}
    m = len(p["contrasts"])
    kind, src, strat = ev["kind"], ev["source_index"], ev["stratum"]
    out = []
    for k in p["strata"]:
        sel_b = np.flatnonzero((kind == 0) & (strat == k))
        sel_t = np.flatnonzero((kind == 1) & (strat == k))
        tails = {int(src[i]): i for i in sel_t}
        pairs = sorted((int(src[i]), i, tails[int(src[i])]) for i in sel_b if int(src[i]) in tails)
        if not pairs:
            continue
        bi = np.array([b for _, b, _ in pairs])
        ti = np.array([t for _, _, t in pairs])
        n = len(pairs)
        for cond in p["conditions"]:
            for s in p["seeds"]:
                if [cond, s] not in p.get("pairs", [[cond, s]]):
                    continue  # a partial set: no same-seed baseline or no such run
                c, base = ev[f"{cond}_s{s}_nats"], ev[f"{p['baseline']}_s{s}_nats"]
                db = c[bi].sum(1) - base[bi].sum(1)
                dt = c[ti].sum(1) - base[ti].sum(1)
                bb, bt = ev["bytes"][bi].sum(1), ev["bytes"][ti].sum(1)
                begin = db.sum() / (math.log(2) * bb.sum())
                tail = dt.sum() / (math.log(2) * bt.sum())
                idx = rng.integers(0, n, size=(p["replicates"], n))
                rep = dt[idx].sum(1) / (math.log(2) * bt[idx].sum(1)) - db[idx].sum(1) / (math.log(2) * bb[idx].sum(1))
                cell = {"key": (k, cond, s), "sources": n, "begin_delta": begin, "tail_delta": tail,
                        "interaction": tail - begin, "interval95": np.quantile(rep, [0.025, 0.975]),
                        "begin_bins": (c[bi] - base[bi]).sum(0) / (math.log(2) * bb.sum()),
                        "tail_bins": (c[ti] - base[ti]).sum(0) / (math.log(2) * bt.sum())}
                if (k, cond, s) in contrasts:
                    q = p["alpha"] / (2 * m)
                    cell["interval_adjusted"] = np.quantile(rep, [q, 1 - q])
                out.append(cell)
    return out


def verify(summary_path, evidence_path):
    with open(summary_path) as f:
        summary = json.load(f)
    if not isinstance(summary, dict):
        raise ValueError(f"{summary_path} holds a {type(summary).__name__}, not a window summary")
    z = np.load(evidence_path, allow_pickle=False)
    for k in WHICH:  # evidence written before 2026-12-07 holds neither: nothing to compare
        if k in z.files and summary.get(k) is not None and str(z[k]) != str(summary[k]):
            raise Mismatched(f"{summary_path} is of {k} {summary[k]}, {evidence_path} of {k} {z[k]}: give the summary "
                             f"and the evidence of one population (window_summary_P.json with window_evidence_P.npz)")
    ev = {k: z[k] for k in z.files if k not in ("meta", "status", *WHICH)}
    p = json.loads(str(z["meta"]))
    ok = True

    def check(name, good):
        nonlocal ok
        ok &= bool(good)
        print(f"{'PASS' if good else 'FAIL'}  {name}")

    check(f"{os.path.basename(summary_path)}: evidence parameters equal the summary's",
          json.dumps(p, sort_keys=True) == json.dumps(summary["params"], sort_keys=True))
    check("bytes and counts are whole and non-negative",
          ev["bytes"].dtype.kind in "iu" and ev["count"].dtype.kind in "iu" and ev["bytes"].min() >= 0 and ev["count"].min() >= 0)
    check_population(summary, ev, check)
    cells = recompute(ev, p)
    saved = {(c["stratum"], c["condition"], c["seed"]): c for c in summary["cells"]}
    check(f"{len(cells)} cells recomputed, {len(saved)} saved", len(cells) == len(saved))
    worst, bins_ok = 0.0, True
    for c in cells:
        s = saved.get(c["key"])
        if s is None:
            check(f"cell {c['key']} present in the summary", False)
            continue
        bins_ok &= s.get("sources") == c["sources"]
        for f in ("begin_delta", "tail_delta", "interaction"):
            worst = max(worst, gap(abs(s[f] - c[f])))
        for f in ("interval95", "interval_adjusted", "begin_bins", "tail_bins"):
            if f in c:
                worst = max(worst, gap(np.max(np.abs(np.asarray(s.get(f, [np.inf]), dtype=float) - c[f]))))
        bins_ok &= abs(c["tail_bins"].sum() - c["tail_delta"]) < BIN_TOL and abs(c["begin_bins"].sum() - c["begin_delta"]) < BIN_TOL
        bins_ok &= ("interval_adjusted" in c) == bool(s.get("declared"))
    held = worst <= TOL  # the line states the comparison that was made: "<=" when it held, ">" when it failed
    check(f"deltas, interactions, intervals and bin contributions agree (largest difference {worst:.2e} "
          f"{'<=' if held else '>'} {TOL})", held)
    check(f"position bins add up to the window deltas within {BIN_TOL}; sources and declared contrasts match", bins_ok)
    return ok


def check_population(summary, ev, check):
    """The window population's own numbers: each window's stratum from its source's length and the summary's bounds
    (a window counts in stratum k when its source is at most bound k long, above bound k - 1), the sources and
    tail windows per stratum, and the text targets each checkpoint is scored on (every window's counted targets)."""
    kind, strat = ev["kind"], ev["stratum"]
    bounds = (summary.get("spec") or {}).get("strata")
    if bounds is not None:
        check("each window's stratum follows from its source's length",
              np.array_equal(np.searchsorted(np.asarray(bounds), ev["source_len"], side="left"), strat))
    per = summary.get("per_stratum")
    if per is not None:  # one row per stratum the spec names: a row left out fails too
        k_all = len((summary.get("spec") or {}).get("labels") or per)
        want = [(int(((kind == 0) & (strat == k)).sum()), int(((kind == 1) & (strat == k)).sum())) for k in range(k_all)]
        check("sources and tail windows per stratum", [(c.get("sources"), c.get("tail_windows")) for c in per] == want)
    if "text_targets" in summary:  # summaries written before 2026-12-07 record none
        check("text targets per checkpoint", summary["text_targets"] == int(ev["count"].sum()))


USAGE = "give an eval folder, or SUMMARY.json EVIDENCE.npz (--help for more)"


def usage_problem(args):  # its twin in the other verify_ checker: each runs alone, importing no sibling
    """One line for arguments that are neither an eval folder nor a summary and evidence pair."""
    if len(args) == 1:
        why = "not a folder" if os.path.exists(args[0]) else "no such folder"
        return f"{args[0]}: {why}; {USAGE}"
    return f"{len(args) or 'no'} arguments; {USAGE}"


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    if len(args) == 1 and os.path.isdir(args[0]):
        pairs = [(s, s.replace("window_summary_", "window_evidence_").replace(".json", ".npz"))
                 for s in sorted(glob.glob(os.path.join(args[0], "window_summary_*.json")))]
    elif len(args) == 2:
        pairs = [tuple(args)]
    else:
        print(f"error: {usage_problem(args)}", file=sys.stderr)
        return 2
    if not pairs:
        print(f"error: no window_summary_*.json in {args[0]}", file=sys.stderr)
        return 2
    try:
        results = [verify(s, e) for s, e in pairs]
    except Mismatched as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except UNCHECKABLE as e:
        print(f"error: cannot be checked ({type(e).__name__}: {e}); a truncated or incomplete file?", file=sys.stderr)
        return 2
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed (summaries)")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
