"""Beginning/tail deltas, interactions, paired-source bootstrap and position-bin contributions.

For each stratum with tail windows, condition and seed: the beginning and tail BPB deltas
against the same-seed baseline (ratio of summed nats over summed bytes, on the same
sources), the interaction tail minus beginning, and a paired-source bootstrap that
resamples sources within the stratum. Declared contrasts get Bonferroni-adjusted quantiles
(eight contrasts at 95% -> 99.375%); every cell also gets an exploratory 95% interval.
Position-bin contributions divide each bin's loss difference by the whole window's bytes,
so the bins add up to the window delta.

The arithmetic lives in `window_cells`, which checkers/verify_window_evidence.py repeats
independently from the evidence file alone.
"""
import io
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from corpus.atomic import atomic_write_bytes

BOOTSTRAP_SEED = 20261008
LN2 = math.log(2)


def pair_sources(kind, source_index, stratum, k):
    """Row indices of beginning and tail windows of the sources in stratum k that have a tail."""
    begin = {int(s): i for i, (s, kd, st) in enumerate(zip(source_index, kind, stratum)) if kd == 0 and st == k}
    tail = {int(s): i for i, (s, kd, st) in enumerate(zip(source_index, kind, stratum)) if kd == 1 and st == k}
    srcs = sorted(set(begin) & set(tail))
    return np.asarray([begin[s] for s in srcs], np.int64), np.asarray([tail[s] for s in srcs], np.int64)


def window_cells(ev, conditions, baseline, seeds, strata, contrasts, replicates, alpha, seed):
    """All cells (stratum x condition x seed) in a fixed order; one bootstrap draw per cell."""
    rng = np.random.default_rng(seed)
    m = len(contrasts)
    q_adj = alpha / (2 * m) if m else None
    cells = []
    for k in strata:
        b_idx, t_idx = pair_sources(ev["kind"], ev["source_index"], ev["stratum"], k)
        n = len(b_idx)
        if n == 0:
            continue
        for cond in conditions:
            for s in seeds:
                if f"{cond}_s{s}_nats" not in ev or f"{baseline}_s{s}_nats" not in ev:
                    continue  # a partial set: this condition or its same-seed baseline was not evaluated
                c, base = ev[f"{cond}_s{s}_nats"], ev[f"{baseline}_s{s}_nats"]
                nbytes = ev["bytes"]
                db = (c[b_idx] - base[b_idx]).sum(1)
                dt = (c[t_idx] - base[t_idx]).sum(1)
                bb, bt = nbytes[b_idx].sum(1), nbytes[t_idx].sum(1)
                begin = db.sum() / (LN2 * bb.sum())
                tail = dt.sum() / (LN2 * bt.sum())
                idx = rng.integers(0, n, size=(replicates, n))
                inter_rep = dt[idx].sum(1) / (LN2 * bt[idx].sum(1)) - db[idx].sum(1) / (LN2 * bb[idx].sum(1))
                cell = {
                    "stratum": int(k), "condition": cond, "seed": int(s), "sources": int(n),
                    "begin_delta": float(begin), "tail_delta": float(tail), "interaction": float(tail - begin),
                    "interval95": [float(x) for x in np.quantile(inter_rep, [0.025, 0.975])],
                    "begin_bins": [float(x) for x in (c[b_idx] - base[b_idx]).sum(0) / (LN2 * bb.sum())],
                    "tail_bins": [float(x) for x in (c[t_idx] - base[t_idx]).sum(0) / (LN2 * bt.sum())],
                }
                if (int(k), cond, int(s)) in contrasts:
                    cell["declared"] = True
                    cell["interval_adjusted"] = [float(x) for x in np.quantile(inter_rep, [q_adj, 1 - q_adj])]
                    cell["adjusted_level"] = 1 - alpha / m
                cells.append(cell)
    return cells


def load_window_runs(paths):
    """Window stats parquet files -> evidence arrays (checked to share one window sample)."""
    ev, meta0, runs = {}, None, []
    for p in paths:
        t = pq.read_table(p)
        meta = {k.decode(): v.decode() for k, v in t.schema.metadata.items()}
        if meta0 is None:
            meta0 = meta
            for col in ("source_index", "source_row", "source_len", "stratum", "kind"):
                ev[col] = t.column(col).to_numpy()
            nb = int(meta["bins"])
            ev["bytes"] = np.stack([t.column(f"bytes_{b}").to_numpy() for b in range(nb)], 1)
            ev["count"] = np.stack([t.column(f"count_{b}").to_numpy() for b in range(nb)], 1)
        elif meta["fingerprint"] != meta0["fingerprint"]:
            raise ValueError(f"{p}: a different window sample than {paths[0]} (fingerprints differ)")
        name = f"{meta['condition']}_s{meta['seed']}"
        ev[f"{name}_nats"] = np.stack([t.column(f"nats_{b}").to_numpy() for b in range(int(meta["bins"]))], 1)
        runs.append({"name": name, "condition": meta["condition"], "seed": int(meta["seed"]),
                     # relative to the evaluation folder (RUN/windows_P.parquet): the summary stays true when it moves
                     "checkpoint_sha256": meta.get("checkpoint_sha256"), "file": f"{Path(p).parent.name}/{Path(p).name}"})
    return ev, meta0, runs


def compare_windows(paths, contrast_strata=(5, 6), baseline="baseline", replicates=10000, alpha=0.05,
                    seed=BOOTSTRAP_SEED):
    """Cells for every (condition, seed) whose same-seed baseline is among the paths; contrasts only among those."""
    ev, meta, runs = load_window_runs(paths)
    spec = json.loads(meta["spec"])
    seeds = sorted({r["seed"] for r in runs})
    conditions = sorted({r["condition"] for r in runs} - {baseline})
    first_long = int(np.searchsorted(np.asarray(spec["strata"]), spec["context"] + 1, side="left")) + 1
    strata = list(range(first_long, len(spec["labels"])))
    present = {r["name"] for r in runs}
    pairs = [[c, s] for c in conditions for s in seeds if f"{c}_s{s}" in present and f"{baseline}_s{s}" in present]
    contrasts = [(int(k), c, int(s)) for k in contrast_strata for c, s in pairs]
    params = {"conditions": conditions, "baseline": baseline, "seeds": seeds, "pairs": pairs, "strata": strata,
              "contrasts": contrasts, "replicates": replicates, "alpha": alpha, "seed": seed,
              "generator": "numpy.random.default_rng (PCG64)", "labels": spec["labels"], "bins": spec["bins"]}
    cells = window_cells(ev, conditions, baseline, seeds, strata, set(contrasts), replicates, alpha, seed)
    summary = {"population": meta.get("population"), "fingerprint": meta["fingerprint"], "spec": spec,
               "params": params, "runs": runs, "cells": cells,
               # the targets each checkpoint is scored on in this population's windows (one window sample for all)
               "text_targets": int(ev["count"].sum())}
    return summary, ev


def write_evidence(path, ev, summary):
    """The evidence file: the sums the cells are recomputed from, the parameters, and which population they are of
    (its name and stream fingerprint), so that a checker given another population's summary says so."""
    buf = io.BytesIO()
    extra = {"status": np.asarray(summary["status"])} if "status" in summary else {}
    which = {k: np.asarray(str(summary[k])) for k in ("population", "fingerprint") if summary.get(k) is not None}
    np.savez(buf, meta=np.asarray(json.dumps(summary["params"])), **which, **extra, **ev)
    atomic_write_bytes(path, buf.getvalue())


PAPER_FIRST, PAPER_AFTER = 128, 512  # the paper's "first 128" and "after 512" positions at context 2048


def paper_bin_cuts(bins, context):
    """Bin indices of the paper's first-128 / after-512 split, scaled with the context (positions are bin edges)."""
    first, after = round(PAPER_FIRST * context / 2048), round(PAPER_AFTER * context / 2048)
    if first not in bins or after not in bins:
        raise ValueError(f"bins {bins} have no edges at {first} and {after}")
    return list(bins).index(first), list(bins).index(after), first, after


def _pct(part, whole):
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def window_table_md(summary, label="") -> str:
    """Section 5.5 tables of one population: declared contrasts, position bins (also in the paper's form), all cells."""
    labels = summary["spec"]["labels"]
    pop = summary["population"]
    cells = summary["cells"]
    declared = [c for c in cells if c.get("declared")]
    m = max(1, len(summary["params"]["contrasts"]))
    # the paper declares its contrasts on confirmation; on development the same cells are exploratory
    dev = "" if pop != "dev" else (" The paper declares these contrasts on confirmation only: on development they "
                                   "are the same cells, exploratory, shown with the same adjustment for comparison.")
    out = [f"#### Declared contrasts ({pop}){label}: tail minus beginning, paired-source bootstrap", "",
           f"{len(summary['params']['contrasts'])} declared contrasts; Bonferroni-adjusted "
           f"{100 * (1 - summary['params']['alpha'] / m):.3f}% quantiles of {summary['params']['replicates']:,} replicates."
           + dev,
           "", "| Condition | Seed | Source length | Sources | Prefix delta | Tail delta | Tail minus prefix | "
           f"{100 * (1 - summary['params']['alpha'] / m):.3f}% interval |",
           "|---|---:|---|---:|---:|---:|---:|---|"]
    for c in declared:
        lo, hi = c["interval_adjusted"]
        out.append(f"| {c['condition']} | {c['seed']} | {labels[c['stratum']]} | {c['sources']} | {c['begin_delta']:+.6f} | "
                   f"{c['tail_delta']:+.6f} | {c['interaction']:+.6f} | [{lo:+.6f}, {hi:+.6f}] |")
    if not declared:
        out.append("| (none: no condition has its same-seed baseline, or no declared stratum has tail windows) |"
                   " | | | | | | |")
    bins, context = summary["spec"]["bins"], summary["spec"]["context"]
    i_first, i_after, first, after = paper_bin_cuts(bins, context)
    scaled = "" if context == 2048 else (f" At context {context} the positions scale by {context}/2048: the paper's "
                                         f"first 128 are the first {first} here, after 512 is after {after}.")
    out += ["", f"#### Tail position-bin contributions ({pop}){label}", "",
            "Each bin's loss difference divided by the whole window's bytes, so the bins add up to the tail delta; "
            "shares are of the tail delta (of the improvement where it is negative)." + scaled, "",
            f"| Condition | Seed | Source length | Full tail delta | Contribution first {first} | "
            f"Contribution after {after} | Share first {first} | Share after {after} |",
            "|---|---:|---|---:|---:|---:|---:|---:|"]
    for c in declared:
        a, b = sum(c["tail_bins"][:i_first]), sum(c["tail_bins"][i_after:])
        out.append(f"| {c['condition']} | {c['seed']} | {labels[c['stratum']]} | {c['tail_delta']:+.6f} | {a:+.6f} | "
                   f"{b:+.6f} | {_pct(a, c['tail_delta'])} | {_pct(b, c['tail_delta'])} |")
    out += ["", "Every bin:", "",
            "| Condition | Seed | Source length | Full tail delta | " +
            " | ".join(f"[{a},{b})" for a, b in zip(bins[:-1], bins[1:])) + " |",
            "|---|---:|---|---:|" + "---:|" * (len(bins) - 1)]
    for c in declared:
        out.append(f"| {c['condition']} | {c['seed']} | {labels[c['stratum']]} | {c['tail_delta']:+.6f} | " +
                   " | ".join(f"{x:+.6f} ({_pct(x, c['tail_delta'])})" for x in c["tail_bins"]) + " |")
    out += ["", f"#### All cells ({pop}){label}, exploratory 95% intervals", "",
            "| Condition | Seed | Source length | Sources | Prefix delta | Tail delta | Tail minus prefix | 95% interval |",
            "|---|---:|---|---:|---:|---:|---:|---|"]
    for c in cells:
        lo, hi = c["interval95"]
        out.append(f"| {c['condition']} | {c['seed']} | {labels[c['stratum']]} | {c['sources']} | {c['begin_delta']:+.6f} | "
                   f"{c['tail_delta']:+.6f} | {c['interaction']:+.6f} | [{lo:+.6f}, {hi:+.6f}] |")
    return "\n".join(out) + "\n"
