"""A synthetic length stream shaped like the paper's census (section 5.2).

846,848 sources, 631,241,817 BOS-inclusive tokens, a unique longest source of 290,219
and exactly 789 / 196 / 39 / 9 / 1 sources of length >= 16,384 / 32,768 / 65,536 /
131,072 / 290,219. The body is lognormal; its mass is corrected to the exact total. Used
by the audit benchmark and tests where the real corpus is not on disk; not a substitute
for it.
"""
import numpy as np

PAPER_SOURCES = 846_848
PAPER_TOKENS = 631_241_817
PAPER_LONGEST = 290_219
PAPER_THRESHOLDS = (16_384, 32_768, 65_536, 131_072, 290_219)
PAPER_COUNTS = (789, 196, 39, 9, 1)


def paper_like_lengths(seed=0, n=PAPER_SOURCES, total=PAPER_TOKENS):
    rng = np.random.default_rng(seed)
    # tail: exact counts in each band [t_k, t_{k+1}), log-uniform inside; the maximum alone
    tail = [np.array([PAPER_LONGEST])]
    bands = list(zip(PAPER_THRESHOLDS[:-1], PAPER_THRESHOLDS[1:], PAPER_COUNTS[:-1], PAPER_COUNTS[1:]))
    for lo, hi, c_lo, c_hi in bands:
        k = c_lo - c_hi
        tail.append(np.exp(rng.uniform(np.log(lo), np.log(hi - 1), k)).astype(np.int64))
    tail = np.concatenate(tail)
    n_body = n - len(tail)
    body = np.exp(rng.normal(np.log(430.0), 1.05, n_body)).astype(np.int64)
    body = np.clip(body, 2, PAPER_THRESHOLDS[0] - 1)
    # correct the body mass to the exact total, spreading the difference over many sources
    diff = total - int(tail.sum()) - int(body.sum())
    idx = rng.permutation(n_body)
    step = 1 if diff > 0 else -1
    while diff:
        take = idx[: min(abs(diff), n_body)]
        cand = body[take] + step
        ok = (cand >= 2) & (cand < PAPER_THRESHOLDS[0])
        body[take[ok]] = cand[ok]
        diff -= step * int(ok.sum())
        idx = rng.permutation(n_body)
    lengths = np.concatenate([body, tail])
    return lengths[rng.permutation(n)]


def census_chunks(n, seed=0, chunk=1 << 20):
    """n census-shaped lengths (the paper's per-pass shares of each length band), a chunk at a time,
    so a stream of 10^8 documents never sits in memory. Body lognormal as above; each tail band
    [t_k, t_k+1) drawn with its per-pass share, log-uniform inside; the longest band is 290,219 exactly."""
    rng = np.random.default_rng(seed)
    shares = [(lo, hi, (c_lo - c_hi) / PAPER_SOURCES) for lo, hi, c_lo, c_hi in
              zip(PAPER_THRESHOLDS[:-1], PAPER_THRESHOLDS[1:], PAPER_COUNTS[:-1], PAPER_COUNTS[1:])]
    shares.append((PAPER_LONGEST, PAPER_LONGEST + 1, PAPER_COUNTS[-1] / PAPER_SOURCES))
    done = 0
    while done < n:
        k = min(chunk, n - done)
        out = np.clip(np.exp(rng.normal(np.log(430.0), 1.05, k)).astype(np.int64), 2, PAPER_THRESHOLDS[0] - 1)
        for lo, hi, p in shares:
            at = np.flatnonzero(rng.random(k) < p)
            out[at] = np.exp(rng.uniform(np.log(lo), np.log(hi - 1), len(at))).astype(np.int64) if hi - lo > 1 else lo
        yield out
        done += k
