"""The source-window diagnostic (paper section 4, "Evaluation populations").

From a declared row range of the validation shard: split sources into eight
BOS-inclusive length strata, sample at most 256 per stratum uniformly without replacement
(numpy PCG64 generator, named seed: 147018 development, 147019 confirmation), and build
for each source its beginning window (BOS + first <= 2048 text tokens) and, for sources
longer than R = 2049, its tail window (BOS + final 2048 text tokens). Windows are
right-padded with masked targets and scored per position bin [0,32), [32,128),
[128,512), [512,2048).

For a smaller context the strata and bins scale by context/2048 (the R boundary stays
exactly R), so the tiny CPU models run the same analysis.
"""
import hashlib
from dataclasses import asdict, dataclass

import numpy as np

from eval.official import score_fixed_shape

PAPER_CONTEXT = 2048
PAPER_STRATA = (128, 512, 1024, 2049, 4096, 8192, 16384)  # inclusive upper bounds; the 8th stratum is the rest
PAPER_BINS = (0, 32, 128, 512, 2048)
POPULATIONS = {"dev": {"rows": (0, 38016), "seed": 147018}, "conf": {"rows": (49152, 84992), "seed": 147019}}
BEGIN, TAIL = 0, 1


@dataclass(frozen=True)
class WindowSpec:
    context: int = 2048
    strata: tuple = PAPER_STRATA
    bins: tuple = PAPER_BINS
    per_stratum: int = 256
    seed: int = 147018
    generator: str = "numpy.random.default_rng (PCG64)"

    @property
    def row_capacity(self) -> int:
        return self.context + 1

    @classmethod
    def for_context(cls, context, seed, per_stratum=256):
        f = context / PAPER_CONTEXT
        strata = tuple(context + 1 if b == PAPER_CONTEXT + 1 else max(1, round(b * f)) for b in PAPER_STRATA)
        bins = tuple(int(round(b * f)) for b in PAPER_BINS)
        return cls(context, strata, bins, per_stratum, seed)

    def labels(self):
        out, lo = [], 1
        for b in self.strata:
            out.append(f"{lo}-{b}")
            lo = b + 1
        return out + [f">{self.strata[-1]}"]

    def to_dict(self):
        return {**asdict(self), "labels": self.labels()}


def stratum_of(lengths, spec: WindowSpec):
    return np.searchsorted(np.asarray(spec.strata), np.asarray(lengths), side="left")


def sample_sources(lengths, spec: WindowSpec):
    """Indices (into `lengths`) of the sampled sources, stratum by stratum, each stratum in index order."""
    strata = stratum_of(lengths, spec)
    rng = np.random.default_rng(spec.seed)
    chosen = []
    for k in range(len(spec.strata) + 1):
        cand = np.flatnonzero(strata == k)
        take = min(spec.per_stratum, len(cand))
        pick = rng.choice(len(cand), size=take, replace=False) if take else np.zeros(0, np.int64)
        chosen.append(np.sort(cand[pick]))
    return np.concatenate(chosen).astype(np.int64)


def build_windows(stream, spec: WindowSpec):
    """Sample sources of a stream (a row range of the validation shard) and cut their windows.

    Returns dict: x, y (int64 [N, context], y = -1 on padding), and per window source_index,
    source_row, source_len, stratum, kind (0 beginning, 1 tail); plus a fingerprint.
    """
    R = spec.row_capacity
    idx = sample_sources(stream.lengths, spec)
    strata = stratum_of(stream.lengths, spec)
    rows_of = getattr(stream, "shard_row", np.arange(stream.n))
    xs, ys, meta = [], [], []
    for i in idx.tolist():
        doc = np.asarray(stream.doc_tokens(i), dtype=np.int64)
        L = len(doc)
        wins = [(BEGIN, doc[:min(L, R)])]
        if L > R:
            wins.append((TAIL, np.concatenate([doc[:1], doc[L - (R - 1):]])))
        for kind, w in wins:
            x = np.full(spec.context, doc[0], dtype=np.int64)
            y = np.full(spec.context, -1, dtype=np.int64)
            x[: len(w) - 1] = w[:-1]
            y[: len(w) - 1] = w[1:]
            xs.append(x)
            ys.append(y)
            meta.append((i, int(rows_of[i]), L, int(strata[i]), kind))
    x, y = np.stack(xs), np.stack(ys)
    m = np.asarray(meta, dtype=np.int64).reshape(-1, 5)
    h = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
    return {"x": x, "y": y, "source_index": m[:, 0], "source_row": m[:, 1], "source_len": m[:, 2],
            "stratum": m[:, 3], "kind": m[:, 4], "fingerprint": h}


def score_windows(model, win, token_bytes, spec: WindowSpec, device, autocast=False, batch=64):
    # the last, smaller batch is padded to `batch` rows with masked targets: a compiled model sees one shape
    parts = [score_fixed_shape(model, win["x"][s:s + batch], win["y"][s:s + batch], token_bytes, list(spec.bins), device,
                               autocast, batch) for s in range(0, len(win["x"]), batch)]
    return {"nats": np.concatenate([p[0] for p in parts]), "bytes": np.concatenate([p[1] for p in parts]),
            "count": np.concatenate([p[2] for p in parts])}


def counts_per_stratum(win, spec: WindowSpec):
    labels = spec.labels()
    out = []
    for k, lab in enumerate(labels):
        m = win["stratum"] == k
        out.append({"stratum": lab, "sources": int((m & (win["kind"] == BEGIN)).sum()),
                    "tail_windows": int((m & (win["kind"] == TAIL)).sum())})
    return out
