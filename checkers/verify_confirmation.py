#!/usr/bin/env python3
"""Check the confirmation table (section 5.4) against the per-row evidence and confirmation.json (numpy only).

  python checkers/verify_confirmation.py runs/main/eval
  python checkers/verify_confirmation.py CONFIRMATION.json REPORT.md [EVIDENCE.npz]

What is checked: from confirmation_evidence.npz (the per-row nats, bytes and counted targets of every
run's confirmation_rows.parquet, which numpy cannot read), each run's official CE (nats / counted
targets), BPB (nats / (ln 2 x bytes)), perplexity (e^CE), counted targets and bytes, recomputed and held
against confirmation.json, and every row of report.md's section 5.4 table (confirmation BPB, its delta
against the same-seed baseline, CE, perplexity) held against those recomputed numbers within the
table's printed precision; the evidence's runs and status stamp equal confirmation.json's. Also, from
confirmation.json alone: each score's BPB and perplexity from its own CE, targets and bytes, whole
non-negative targets and bytes, one input/target fingerprint for every checkpoint, and the table's
cells as confirmation.json formats them. Without the evidence file (an output folder written before
it existed) one line says so and only the confirmation.json checks run: a score whose BPB, CE and
perplexity were changed together then passes. Not checked: that the evidence holds the rows the
checkpoints give (python -m eval re-scores them); the development columns (each run's own official
score, train/*/summary.json). One line per check; exit 1 on any difference beyond 1e-9 (relative, at
least 1e-9 absolute; table cells also half their last printed digit) or any non-finite value, 2 on
missing, unreadable or incomplete files.
"""
import json
import math
import os
import sys
import zipfile
import zlib

import numpy as np

TOL = 1e-9
# what a missing, truncated or malformed file raises somewhere in the checks: never a PASS, never a traceback
UNCHECKABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError, zipfile.BadZipFile,
               zlib.error)
EVIDENCE = "confirmation_evidence.npz"
PRINTED = (8, 8, 8, 5)  # decimals of the table's confirmation BPB, delta, CE and perplexity cells
COLUMNS = 8  # Condition | Seed | Development BPB | Development delta | Confirmation BPB | delta | CE | Perplexity


def off(saved, want):
    """How far a saved number is from the recomputed one, relative above 1; NaN and infinities are infinitely far."""
    d = abs(float(saved) - want) / max(1.0, abs(want))
    return d if math.isfinite(d) else math.inf


def score_lines(scores):
    """(passed, line) per score: its BPB and perplexity from its CE, targets and bytes."""
    out = []
    for s in scores:
        name = f"{s['condition']} seed {s['seed']}"
        count, nbytes = s["counted_targets"], s["bytes"]
        if not (isinstance(count, int) and isinstance(nbytes, int) and count > 0 and nbytes > 0):
            out.append((False, f"{name}: counted targets {count} and bytes {nbytes} are whole and positive"))
            continue
        bpb = s["ce"] * count / (math.log(2) * nbytes)
        try:
            ppl = math.exp(s["ce"])
        except OverflowError:  # a CE beyond ~709 nats: no finite saved perplexity can equal it
            ppl = math.inf
        for what, saved, want in (("BPB", s["bpb"], bpb), ("perplexity", s["perplexity"], ppl)):
            d = off(saved, want)
            held = d <= TOL
            out.append((held, f"{name}: {what} {saved!r} vs {want!r} recomputed from CE, targets and bytes "
                              f"(difference {d:.2e} {'<=' if held else '>'} {TOL})"))
    return out


def table_rows(report):
    """The 5.4 table's rows as {(condition, seed): cells}, from report.md's text."""
    sec = report.split("\n## 5.4 ", 1)[1].split("\n## ", 1)[0]
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in sec.splitlines() if ln.startswith("|")]
    rows = [c for c in cells[2:] if len(c) == COLUMNS]  # past the header and its rule
    if len(rows) != len(cells) - 2:
        raise ValueError(f"the 5.4 table has a row of other than {COLUMNS} cells")
    return {(c[0], int(c[1])): c for c in rows}


def expected_cells(scores):
    """What the evaluation writes in each row's last four cells, as eval/__main__.py formats them."""
    bpb = {(s["condition"], s["seed"]): s["bpb"] for s in scores}
    out = {}
    for s in scores:
        base = bpb.get(("baseline", s["seed"]))
        delta = f"{s['bpb'] - base:+.8f}" if base is not None else "n/a (no baseline)"
        out[(s["condition"], s["seed"])] = [f"{s['bpb']:.8f}", delta, f"{s['ce']:.8f}", f"{s['perplexity']:.5f}"]
    return out


def table_lines(scores, report):
    """(passed, line) per table row: confirmation BPB, delta, CE and perplexity as the scores give them."""
    rows, want = table_rows(report), expected_cells(scores)
    out = [(sorted(rows) == sorted(want), f"report.md's 5.4 table has {len(rows)} rows, confirmation.json "
                                          f"{len(want)} scores, for the same runs")]
    names = ("confirmation BPB", "confirmation delta", "CE", "perplexity")
    for key in sorted(set(rows) & set(want)):
        bad = [f"{n} {have}, confirmation.json gives {w}" for n, have, w in zip(names, rows[key][4:], want[key]) if have != w]
        out.append((not bad, f"table row {key[0]} seed {key[1]}: " + ("; ".join(bad) or "all four numbers agree")))
    return out


def load_evidence(path):
    """The evidence arrays, each run's row of nats, bytes and counts keyed by (condition, seed)."""
    with np.load(path, allow_pickle=False) as z:
        ev = {k: z[k] for k in ("runs", "conditions", "seeds", "nats", "bytes", "count", "status")}
    n = len(ev["runs"])
    if not (ev["nats"].ndim == 2 and ev["nats"].shape[0] == n and ev["bytes"].shape == ev["count"].shape == ev["nats"].shape
            and len(ev["conditions"]) == len(ev["seeds"]) == n):
        raise ValueError(f"{path}: arrays of inconsistent shapes")
    return ev


def recomputed(ev):
    """{(condition, seed): run, CE, BPB, perplexity, counted targets, bytes}: the official metric's formulas."""
    out = {}
    for i, run in enumerate(ev["runs"].tolist()):
        nats, count, nbytes = float(np.sum(ev["nats"][i])), int(np.sum(ev["count"][i])), int(np.sum(ev["bytes"][i]))
        ce = nats / count if count > 0 else math.inf
        out[(str(ev["conditions"][i]), int(ev["seeds"][i]))] = {
            "run": run, "ce": ce, "bpb": nats / (math.log(2) * nbytes) if nbytes > 0 else math.inf,
            "perplexity": math.exp(ce) if ce < 709 else math.inf, "counted_targets": count, "bytes": nbytes}
    return out


def evidence_lines(conf, ev, want):
    """(passed, line) per number: confirmation.json's scores against those recomputed from the evidence."""
    saved = {(s["condition"], s["seed"]): s for s in conf["scores"]}
    whole = ev["bytes"].dtype.kind in "iu" and ev["count"].dtype.kind in "iu" and min(
        ev["bytes"].min(initial=0), ev["count"].min(initial=0)) >= 0
    out = [(str(ev["status"]) == conf["status"], f"{EVIDENCE}'s status stamp equals confirmation.json's"),
           (whole, f"{EVIDENCE}: bytes and counted targets are whole and non-negative"),
           (sorted(saved) == sorted(want), f"{EVIDENCE} holds {len(want)} runs, confirmation.json {len(saved)} "
                                           "scores, for the same runs")]
    for key in sorted(set(saved) & set(want)):
        s, w = saved[key], want[key]
        name = f"{key[0]} seed {key[1]}"
        out.append((s.get("run") == w["run"], f"{name}: run {s.get('run')} in confirmation.json, {w['run']} in {EVIDENCE}"))
        for what in ("counted_targets", "bytes"):
            out.append((s[what] == w[what], f"{name}: {what.replace('_', ' ')} {s[what]!r} vs {w[what]} summed "
                                            f"from {EVIDENCE}"))
        for what in ("ce", "bpb", "perplexity"):
            d = off(s[what], w[what])
            out.append((d <= TOL, f"{name}: {what if what == 'perplexity' else what.upper()} {s[what]!r} vs "
                                  f"{w[what]!r} recomputed from {EVIDENCE} (difference {d:.2e} "
                                  f"{'<=' if d <= TOL else '>'} {TOL})"))
    return out


def number(cell):
    """A table cell's number; NaN for text ('n/a (no baseline)' where the evidence has a baseline)."""
    try:
        return float(cell)
    except ValueError:
        return math.nan


def evidence_table_lines(report, want):
    """(passed, line) per table number: report.md's 5.4 cells against the evidence's scores and deltas."""
    rows = table_rows(report)
    names = ("confirmation BPB", "confirmation delta", "CE", "perplexity")
    out = []
    for key in sorted(set(rows) & set(want)):
        w, base = want[key], want.get(("baseline", key[1]))
        values = (w["bpb"], w["bpb"] - base["bpb"] if base else None, w["ce"], w["perplexity"])
        for name, cell, value, places in zip(names, rows[key][4:], values, PRINTED):
            sign = "+" if name.endswith("delta") else ""  # as the cell is printed, four more decimals
            shown = "none (no baseline)" if value is None else f"{value:{sign}.{places + 4}f}"
            line = f"table row {key[0]} seed {key[1]}: {name} {cell} vs {shown} recomputed from {EVIDENCE}"
            if value is None:  # no same-seed baseline was evaluated
                out.append((cell == "n/a (no baseline)", line))
                continue
            tol = 0.5 * 10 ** -places + TOL * max(1.0, abs(value))  # the cell is rounded to its printed decimals
            d = abs(number(cell) - value)
            d = d if math.isfinite(d) else math.inf  # NaN, or a cell that is no number, is infinitely far
            out.append((d <= tol, f"{line} (difference {d:.2e} {'<=' if d <= tol else '>'} {tol:.2e})"))
    return out


def verify(conf_path, report_path, evidence_path=None):
    """Every check's line printed; True when all held. evidence_path None: the evidence beside confirmation.json,
    if any (an older output folder has none)."""
    with open(conf_path) as f:
        conf = json.load(f)
    if not isinstance(conf, dict):
        raise ValueError(f"{conf_path} holds a {type(conf).__name__}, not a confirmation object")
    with open(report_path) as f:
        report = f.read()
    scores = conf["scores"]
    lines = [(len({s["fingerprint"] for s in scores}) == 1, f"{len(scores)} scores, one input/target fingerprint")]
    lines += score_lines(scores) + table_lines(scores, report)
    beside = os.path.join(os.path.dirname(conf_path), EVIDENCE)
    if evidence_path is None and not os.path.exists(beside):
        print(f"NOTE  no {EVIDENCE} (written before it existed): scores checked against their own totals only, "
              "not recomputed from per-row statistics")
    else:
        ev = load_evidence(evidence_path or beside)
        want = recomputed(ev)
        lines += evidence_lines(conf, ev, want) + evidence_table_lines(report, want)
    for held, line in lines:
        print(f"{'PASS' if held else 'FAIL'}  {line}")
    passed = sum(held for held, _ in lines)
    print(f"{passed} passed, {len(lines) - passed} failed")
    return passed == len(lines)


USAGE = "give an eval folder, or CONFIRMATION.json REPORT.md [EVIDENCE.npz] (--help for more)"


def usage_problem(args):  # the twin of the other verify_ checkers': each runs alone, importing no sibling
    """One line for arguments that are neither an eval folder nor a confirmation and report pair."""
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
        args = [os.path.join(args[0], "confirmation.json"), os.path.join(args[0], "report.md")]
    if len(args) not in (2, 3):
        print(f"error: {usage_problem(args)}", file=sys.stderr)
        return 2
    try:
        return 0 if verify(*args) else 1
    except FileNotFoundError as e:  # a missing file is not a truncated one
        print(f"error: {e.filename}: no such file; {USAGE}", file=sys.stderr)
        return 2
    except UNCHECKABLE as e:
        print(f"error: cannot be checked ({type(e).__name__}: {e}); a truncated or incomplete file?", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
