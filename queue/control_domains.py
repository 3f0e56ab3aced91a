"""Held-out control domains: fixed windows per source label of the validation shard.

Each domain (library code, test code, prose for the offline corpus) gets up to
`per_domain` documents sampled with a named seed; each contributes its beginning window
(BOS + first `context` tokens). BPB per domain is the ratio of summed nats to summed
bytes over that domain's windows, with the positive-byte mask.
"""
import math

import numpy as np

from eval.scoring import score_rows


def build_controls(stream, labels, context, per_domain=64, seed=3003, min_docs=4):
    rng = np.random.default_rng(seed)
    out = {}
    for dom in sorted(set(labels)):
        cand = np.asarray([i for i, lab in enumerate(labels) if lab == dom])
        if len(cand) < min_docs:
            continue
        pick = np.sort(cand[rng.choice(len(cand), size=min(per_domain, len(cand)), replace=False)])
        x = np.zeros((len(pick), context), dtype=np.int64)
        y = np.full((len(pick), context), -1, dtype=np.int64)
        for r, i in enumerate(pick.tolist()):
            doc = np.asarray(stream.doc_tokens(i), dtype=np.int64)[: context + 1]
            x[r, : len(doc) - 1] = doc[:-1]
            y[r, : len(doc) - 1] = doc[1:]
        out[dom] = {"x": x, "y": y, "docs": pick.tolist()}
    return out


def measure(model, controls, token_bytes, device, autocast=False):
    """{domain: BPB} of the model on each control domain."""
    res = {}
    for dom, c in controls.items():
        nats, nbytes, _ = score_rows(model, c["x"], c["y"], token_bytes, [0, c["x"].shape[1]], device, autocast)
        res[dom] = float(nats.sum() / (math.log(2) * nbytes.sum()))
    return res
