"""report.md, decisions.parquet/.csv and the control-curve figure of a queue run."""
import json
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_bytes, atomic_write_text


def _ranks(v):
    v = np.asarray(v, dtype=float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    r[order] = np.arange(len(v))
    for x in np.unique(v):  # average ranks for ties
        m = v == x
        r[m] = r[m].mean()
    return r


def spearman(a, b):
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def auc(scores, labels):
    """P(score of a positive > score of a negative), ties 1/2; None without both classes."""
    pos = [s for s, l in zip(scores, labels) if l]
    neg = [s for s, l in zip(scores, labels) if not l]
    if not pos or not neg:
        return None
    return float(np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg]))


def max_rise(rec):
    """The largest rise over the reference in units of the threshold's sigma (k * sigma_d / k)."""
    thr = rec.get("thresholds") or {}
    return max((rec["deltas"][d] / thr[d] for d in thr if thr[d] > 0), default=None)


def screen_agreement(recs):
    """How well the forward-only screen predicts the training-based measurement (candidate shards)."""
    c = [r for r in recs if r["event"] == "train" and r["role"] == "candidate" and "screen" in r and max_rise(r) is not None]
    s = [r["screen"]["score"] for r in c]
    return {"n": len(c), "spearman_screen_vs_rise": spearman(s, [max_rise(r) for r in c]),
            "auc_screen_flagged": auc(s, [bool(r["flagged"]) for r in c]), "flagged": sum(bool(r["flagged"]) for r in c),
            "caveat": f"{len(c)} shards, {sum(bool(r['flagged']) for r in c)} flagged: a small sample; read as a sketch"}
