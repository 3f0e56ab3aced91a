"""Slow, literal reference packers: a Python list scanned exactly as the packing rules read (docs/baseline.md, "Packing").

The buffer is a list in arrival order. Fit: the first index holding the largest length
<= remaining. Otherwise: the first index holding the smallest length; original,
segment-first and random spans pop it and discard the rest; lossless replaces it in place
by its suffix (no new BOS). Tests hold loaders/core.py against this, token for token.
Events have the core's tuple form (source_id, span_start, emitted, discarded, kind, lead_bos).
"""
import random

from loaders.core import CROP, FIT, RANDOM_SPAN_SEED


class ReferencePacker:
    def __init__(self, docs, refills, packer="original", R=2049, B=1000, bos=0, seed=RANDOM_SPAN_SEED):
        self.docs, self.refills = [list(d) for d in docs], list(refills)
        self.packer, self.R, self.B, self.bos = packer, R, B, bos
        self.buf = []  # [source_id, span_start, lead_bos, tokens]
        self.k = 0
        self.p = 0
        self.rng = random.Random(seed)

    def _refill(self):
        n = len(self.docs)
        lo, hi = self.refills[self.k], self.refills[self.k + 1]
        for i in range(lo, hi):
            toks = self.docs[i]
            src = self.p * n + i
            if self.packer == "segment_first" and len(toks) > self.R:
                text = toks[1:]
                step = self.R - 1
                for c in range(0, len(text), step):
                    if c == 0:
                        self.buf.append([src, 0, 0, [toks[0]] + text[:step]])
                    else:
                        self.buf.append([src, 1 + c, 1, [self.bos] + text[c:c + step]])
            else:
                self.buf.append([src, 0, 0, list(toks)])
        self.k += 1
        if self.k == len(self.refills) - 1:
            self.k, self.p = 0, self.p + 1

    def next_rows(self, n_rows):
        rows, events = [], []
        for _ in range(n_rows):
            row = []
            while len(row) < self.R:
                while len(self.buf) < self.B:
                    self._refill()
                rem = self.R - len(row)
                best, best_len = -1, 0
                for idx, span in enumerate(self.buf):
                    if len(span[3]) <= rem and len(span[3]) > best_len:
                        best, best_len = idx, len(span[3])
                if best >= 0:
                    src, start, lead, toks = self.buf.pop(best)
                    row += toks
                    events.append((src, start, len(toks), 0, FIT, lead))
                    continue
                short = min(range(len(self.buf)), key=lambda j: len(self.buf[j][3]))
                src, start, lead, toks = self.buf[short]
                if self.packer == "lossless":
                    self.buf[short] = [src, start + rem, 0, toks[rem:]]
                    row += toks[:rem]
                    events.append((src, start, rem, 0, CROP, lead))
                    continue
                self.buf.pop(short)
                if self.packer == "random_span":
                    d = self.rng.randrange(len(toks) - rem + 1)
                    row += [toks[0]] + toks[1 + d:1 + d + rem - 1]
                    events.append((src, 1 + d, rem, len(toks) - rem, CROP, 1))
                else:
                    row += toks[:rem]
                    events.append((src, start, rem, len(toks) - rem, CROP, lead))
            rows.append(row)
        return rows, events
