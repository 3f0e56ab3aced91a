"""Rankings of several checkpoints on the official stream at prefixes and in full (section 5.6).

For each prefix (262,144 / 2,097,152 / 10,485,760 targets of the 20,971,520, or the same
fractions of a smaller stream), each method's BPB on the first rows, the ranking, the
pairs whose order differs from the full ranking (reversals), and for each method/prefix
contrast against the reference the nominal 95% interval of the same delta over 1,000
uniform row subsets of the same size (without replacement). A prefix delta outside its
interval is flagged; that is not multiplicity-adjusted evidence.
"""
import math

import numpy as np

PAPER_PREFIX_TARGETS = (262_144, 2_097_152, 10_485_760)
PAPER_TOTAL_TARGETS = 20_971_520
RANKING_SEED = 20261009


def prefix_rows(n_rows, context, prefix_targets=PAPER_PREFIX_TARGETS, total=PAPER_TOTAL_TARGETS):
    """Rows per prefix: the paper's target counts when the stream is that long, else the same fractions."""
    if n_rows * context == total:
        return [t // context for t in prefix_targets]
    return [max(2, int(round(n_rows * t / total))) for t in prefix_targets]


def scaled_prefixes(res, context) -> str:
    """Where the prefixes scored are not the declared target counts (eval's rankings record them: the paper's unless a
    protocol says otherwise), what they stand for."""
    declared = (res.get("declared") or {}).get("paper_prefix_targets")
    if not declared or [q["rows"] * context for q in res["prefixes"]] == list(declared):
        return ""
    paper = " (the paper's)" if list(declared) == list(PAPER_PREFIX_TARGETS) else ""
    return (" The prefixes stand for the declared " + " / ".join(f"{t:,}" for t in declared) + f"{paper} of "
            f"{PAPER_TOTAL_TARGETS:,} targets, at the same fractions of this stream.")


def bpb(nats, nbytes):
    return float(nats.sum() / (math.log(2) * nbytes.sum()))


def order(scores):
    return sorted(scores, key=lambda m: (scores[m], m))


def rankings(nats, nbytes, names, reference, prefixes, subsets=1000, seed=RANKING_SEED):
    """nats, nbytes: [methods, rows] arrays in `names` order."""
    full = {m: bpb(nats[i], nbytes[i]) for i, m in enumerate(names)}
    full_order = order(full)
    rng = np.random.default_rng(seed)
    r = names.index(reference)
    n = nats.shape[1]
    out = {"methods": names, "reference": reference, "full": full, "full_order": full_order, "prefixes": [], "total_rows": n,
           "subsets": subsets, "seed": seed, "generator": "numpy.random.default_rng (PCG64)"}
    for rows in prefixes:
        pre = {m: bpb(nats[i, :rows], nbytes[i, :rows]) for i, m in enumerate(names)}
        po = order(pre)
        rev = [[a, b] for i, a in enumerate(full_order) for b in full_order[i + 1:] if po.index(a) > po.index(b)]
        sub = np.stack([rng.choice(n, size=rows, replace=False) for _ in range(subsets)])
        contrasts = []
        for i, m in enumerate(names):
            if i == r:
                continue
            d_sub = (nats[i][sub].sum(1) / (math.log(2) * nbytes[i][sub].sum(1))
                     - nats[r][sub].sum(1) / (math.log(2) * nbytes[r][sub].sum(1)))
            lo, hi = np.quantile(d_sub, [0.025, 0.975])
            d = pre[m] - pre[reference]
            contrasts.append({"method": m, "delta": d, "full_delta": full[m] - full[reference],
                              "interval95": [float(lo), float(hi)], "outside": bool(d < lo or d > hi)})
        out["prefixes"].append({"rows": rows, "scores": pre, "order": po, "reversals": rev, "contrasts": contrasts})
    return out


def rankings_md(res, context) -> str:
    names = res["full_order"]
    k, p = len(res["methods"]) - 1, len(res["prefixes"])
    outside = sum(c["outside"] for q in res["prefixes"] for c in q["contrasts"])
    out = [f"{len(res['methods'])} checkpoints on the first {res['total_rows'] * context:,} targets of the official stream; "
           f"{k} methods x {p} prefixes = {k * p} contrasts against {res['reference']} (the paper: 6 x 3 = 18); "
           f"{outside} of {k * p} lie outside their nominal 95% subset interval (not multiplicity-adjusted)."
           + scaled_prefixes(res, context), "",
           "| Method | Full BPB | " + " | ".join(f"{p['rows'] * context:,} targets" for p in res["prefixes"]) + " |",
           "|---|---:|" + "---:|" * len(res["prefixes"])]
    for m in names:
        out.append(f"| {m} | {res['full'][m]:.6f} | " + " | ".join(f"{p['scores'][m]:.6f} (#{p['order'].index(m) + 1})"
                                                             for p in res["prefixes"]) + " |")
    out += ["", "Reversals against the full ranking: " +
            "; ".join(f"{p['rows'] * context:,}: {len(p['reversals'])}" for p in res["prefixes"]), "",
            # "stream-prefix": section 5.5's "prefix delta" is a source's beginning window, not the stream's first rows
            f"| Contrast vs {res['reference']} | Prefix targets | Stream-prefix delta | Full delta | 95% subset interval | "
            "Outside |",
            "|---|---:|---:|---:|---|---|"]
    for p in res["prefixes"]:
        for c in p["contrasts"]:
            lo, hi = c["interval95"]
            out.append(f"| {c['method']} | {p['rows'] * context:,} | {c['delta']:+.6f} | {c['full_delta']:+.6f} | "
                       f"[{lo:+.6f}, {hi:+.6f}] | {'yes' if c['outside'] else 'no'} |")
    return "\n".join(out) + "\n"
