"""Packers to trace: ours, the textbook concatenate-and-chunk, and the libraries researchers use.

Each adapter is a thin function `packer(docs) -> rows` (audit/trace.py) that calls the real
code: our selection core (loaders/core.py) fed one refill at a time, or the library's own
packing function, with the library's defaults wherever it leaves a setting to its caller
(printed in the report as `settings`). A library that is not installed is a one-line error
naming the extra that installs it. Write your own the same way and pass it with
`python -m audit --lengths F --trace MODULE:CALLABLE`.

Token ids: tracer documents start at FIRST_ID; 0 is padding, 1 BOS, 2 EOS (what an adapter
gives a library as its special tokens).
"""
import importlib
from dataclasses import dataclass, field
from itertools import islice

import numpy as np

from audit.feed import PullingCore, StreamEnded
from corpus.errors import DataError

PAD, BOS, EOS = 0, 1, 2
FIRST_ID = 16
EXTRA = "audit-libs"  # pip install -e '.[audit-libs]' (run.sh installs requirements-audit.lock)


@dataclass
class Spec:
    """A packer the audit can run: how to build it, its row capacity, and what the report says of it."""
    name: str
    build: object  # (R, B) -> packer(docs) -> rows
    library: str = ""  # the distribution it needs ("" for ours)
    capacity: object = None  # R -> the row capacity it packs to (default R)
    settings: dict = field(default_factory=dict)
    why_not: str = ""  # why the paper's Proposition does not apply ("" for the paper's family)

    def row_capacity(self, R):
        return self.capacity(R) if self.capacity else R


def require(module, spec_name):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise DataError(f"packer {spec_name}: {module} is not installed ({e.name}); install the '{EXTRA}' extra "
                        f"(pip install -r requirements-audit.lock, or pip install -e '.[{EXTRA}]')") from None


# ---- ours ----------------------------------------------------------------------------
def ours(packer, R, B, refill_docs=128):
    """The paper's packer `packer` (the code that trains), fed refills of refill_docs as it asks.

    When the documents run out it keeps selecting from what is buffered (B = 1) until the
    buffer is empty: only the fate of tokens after the horizon depends on that. BOS markers
    that segment-first adds are written as minus the id they precede; random spans move the
    source's own first token in front of the span (the paper: the same BOS is retained).
    """
    def run(docs):
        # the tracer's documents come a refill at a time, as the stream is cut; any other iterable in slices
        batches = docs.refill_batches() if hasattr(docs, "refill_batches") else _slices(iter(docs), refill_docs)
        store = {}

        def refills():
            for batch in batches:
                base = core.next_source
                for j, d in enumerate(batch):
                    store[base + j] = d
                yield np.fromiter((len(d) for d in batch), np.int64, len(batch)), None

        core = PullingCore(refills(), packer, R, B)
        while True:
            raw, last = [], False
            try:
                core.pack_rows(1, raw)
            except StreamEnded:
                last = core.count == 0
                core.B = 1  # drain what is buffered
            if raw:
                yield _materialize(raw, store, R, packer)
            if last:
                return
            if len(store) > 4 * (B + refill_docs) + 1024:
                live = set(core.buffered_sources().tolist())
                for s in [s for s in store if s not in live]:
                    del store[s]
    return run


def _slices(it, k):
    while True:
        batch = list(islice(it, k))
        if not batch:
            return
        yield batch


def _materialize(raw, store, R, packer):
    out = np.full(R, PAD, dtype=np.int64)
    p = 0
    for src, start, em, _d, _k, lead in raw:
        d = store[src]
        if lead:
            out[p] = d[0] if packer == "random_span" else -d[start]
            out[p + 1:p + em] = d[start:start + em - 1]
        else:
            out[p:p + em] = d[start:start + em]
        p += em
    return out


def concat_chunk(R):
    """Concatenate the documents and cut rows of R tokens (Megatron, LitData, OLMo's FSL dataset)."""
    def run(docs):
        rest = np.zeros(0, np.int64)
        for d in docs:
            rest = np.concatenate([rest, d])
            while len(rest) >= R:
                yield rest[:R]
                rest = rest[R:]
        if len(rest):
            yield rest
    return run


OURS = {p: Spec(p, (lambda p: lambda R, B: ours(p, R, B))(p),
                why_not=("" if p in ("original", "lossless") else
                         "pre-segmentation to lengths at most R removes the hypothesis" if p == "segment_first" else
                         "")) for p in ("original", "lossless", "segment_first", "random_span")}
