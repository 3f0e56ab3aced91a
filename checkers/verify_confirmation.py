#!/usr/bin/env python3
"""Check the confirmation table (section 5.4) against confirmation.json's own totals (standard library only).

  python checkers/verify_confirmation.py runs/main/eval
  python checkers/verify_confirmation.py CONFIRMATION.json REPORT.md

What is checked: each score's BPB and perplexity recomputed from its CE, counted targets and bytes
(BPB = CE x targets / (ln 2 x bytes), perplexity = e^CE), whole non-negative targets and bytes, one
input/target fingerprint for every checkpoint; and every row of report.md's section 5.4 table
(confirmation BPB, its delta against the same-seed baseline, CE, perplexity) recomputed from those
scores. What is not: the per-row statistics behind each score are confirmation_rows.parquet, which
this checker cannot read, so a score whose BPB, CE and perplexity were all changed consistently
passes; the development columns are each run's own official score (train/*/summary.json). One line
per check; exit 1 on any difference beyond 1e-9 (relative, at least 1e-9 absolute) or any
non-finite value, 2 on missing, unreadable or incomplete files.
"""
import json
import math
import os
import sys

TOL = 1e-9
# what a missing, truncated or malformed file raises somewhere in the checks: never a PASS, never a traceback
UNCHECKABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError)
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


def verify(conf_path, report_path):
    with open(conf_path) as f:
        conf = json.load(f)
    if not isinstance(conf, dict):
        raise ValueError(f"{conf_path} holds a {type(conf).__name__}, not a confirmation object")
    with open(report_path) as f:
        report = f.read()
    scores = conf["scores"]
    lines = [(len({s["fingerprint"] for s in scores}) == 1, f"{len(scores)} scores, one input/target fingerprint")]
    lines += score_lines(scores) + table_lines(scores, report)
    for held, line in lines:
        print(f"{'PASS' if held else 'FAIL'}  {line}")
    passed = sum(held for held, _ in lines)
    print(f"{passed} passed, {len(lines) - passed} failed")
    return passed == len(lines)


USAGE = "give an eval folder, or CONFIRMATION.json REPORT.md (--help for more)"


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    if len(args) == 1 and os.path.isdir(args[0]):
        args = [os.path.join(args[0], "confirmation.json"), os.path.join(args[0], "report.md")]
    if len(args) != 2:
        print(f"error: {len(args) or 'no'} arguments; {USAGE}", file=sys.stderr)
        return 2
    try:
        return 0 if verify(*args) else 1
    except UNCHECKABLE as e:
        print(f"error: cannot be checked ({type(e).__name__}: {e}); a truncated or incomplete file?", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
