"""Tables as long as the stream, kept on disk a chunk at a time and read back by range.

The trace's per-document table (where each document's tokens start, its length, its label)
and its decoded emissions grow with the stream; held in memory they made the trace's memory
grow with it (5.4x per 10x documents). Here each is appended in chunks to files in one
folder and read back a range at a time, so memory holds the newest documents, one chunk
and the range being read, whatever the stream's length. Files are plain little-endian
arrays: written once, read with np.fromfile, searched through a memmap dropped right after
(so its pages leave this process's resident memory).
"""
import tempfile
from pathlib import Path

import numpy as np

KEEP_DOCS = 1 << 16  # newest documents kept in memory (at least this many, at most twice)
SPILL_RECORDS = 1 << 15  # records buffered before a chunk is sorted and written (a few MB, sorted copy included)


class Folder:
    """A spill folder made on first use: under `parent` when given, else the system's temporary folder."""

    def __init__(self, parent=None, name="spill"):
        self.parent, self.name, self._tmp = parent, name, None

    @property
    def path(self) -> Path:
        if self._tmp is None:
            if self.parent is not None:
                Path(self.parent).mkdir(parents=True, exist_ok=True)
            self._tmp = tempfile.TemporaryDirectory(prefix=f".{self.name}-", dir=self.parent)
        return Path(self._tmp.name)

    def close(self):
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class DocTable:
    """Per-document int64 columns in arrival order: the newest in memory, the older ones on disk."""

    COLS = ("start", "len", "label")

    def __init__(self, folder=None, keep=None):
        self.folder = folder if isinstance(folder, Folder) else Folder(folder, "docs")
        self.keep = keep or KEEP_DOCS
        self.n = self.tokens = 0
        self.on_disk = 0  # documents 0..on_disk-1 are on disk, on_disk..n-1 in self._buf
        self._buf = np.zeros((len(self.COLS), 2 * self.keep), np.int64)
        self._files = None

    def append(self, lengths, labels):
        """The next documents: their lengths and label ids; returns their first tokens' global indices."""
        L = np.asarray(lengths, np.int64)
        m, t = len(L), self.n - self.on_disk
        if t + m > self._buf.shape[1]:
            self._buf = np.concatenate([self._buf, np.zeros((len(self.COLS), t + m), np.int64)], axis=1)
        starts = self.tokens + np.cumsum(L) - L
        self._buf[:, t:t + m] = (starts, L, labels)
        self.n += m
        self.tokens += int(L.sum())
        if self.n - self.on_disk >= 2 * self.keep:
            self._flush()
        return starts

    def _flush(self):
        """Write all but the newest `keep` to `keep * 2` documents to disk."""
        t = self.n - self.on_disk
        k = (t // self.keep - 1) * self.keep
        if self._files is None:
            self._files = [open(self.folder.path / f"docs_{c}.bin", "wb") for c in self.COLS]
        for f, col in zip(self._files, self._buf[:, :k]):
            col.tofile(f)
            f.flush()
        self._buf[:, :t - k] = self._buf[:, k:t]
        self.on_disk += k

    def column(self, name, d0, d1) -> np.ndarray:
        """Documents d0..d1-1 of one column (0 <= d0 <= d1 <= n)."""
        c = self.COLS.index(name)
        parts = []
        if d0 < self.on_disk:
            e = min(d1, self.on_disk)
            parts.append(np.fromfile(self.folder.path / f"docs_{name}.bin", np.int64, e - d0, offset=8 * d0))
        if d1 > self.on_disk:
            parts.append(self._buf[c, max(d0, self.on_disk) - self.on_disk:d1 - self.on_disk].copy())
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def starts(self, d0, d1) -> np.ndarray:
        """Global index of the first token of documents d0..d1-1, where document n 'starts' at the end."""
        s = self.column("start", d0, min(d1, self.n))
        return np.append(s, self.tokens) if d1 > self.n else s

    def find(self, g) -> np.ndarray:
        """The document holding each global token index g (0 <= g < tokens): the last one starting at or before it."""
        g = np.asarray(g, np.int64)
        t = self.n - self.on_disk
        first_in_memory = self._buf[0, 0] if t else self.tokens
        out = np.empty(g.shape, np.int64)
        mem = g >= first_in_memory
        out[mem] = self.on_disk + np.searchsorted(self._buf[0, :t], g[mem], side="right") - 1
        if not mem.all():
            s = np.memmap(self.folder.path / "docs_start.bin", np.int64, "r", shape=(self.on_disk,))
            out[~mem] = np.searchsorted(s, g[~mem], side="right") - 1
            del s
        return out

    def close(self):
        for f in self._files or ():
            f.close()
        self._files = None
        self.folder.close()


class KeyedSpill:
    """Records appended in any order, stored in chunks each sorted by `key`; read back as every record
    with lo <= key < hi (by chunk, then key, then order of arrival)."""

    def __init__(self, folder, name, dtype, key, chunk=None):
        self.folder, self.name, self.dtype, self.key = folder, name, np.dtype(dtype), key
        self.chunk = chunk or SPILL_RECORDS
        self.parts, self.buffered, self.chunks, self.records = [], 0, [], 0

    def add(self, rec):
        if len(rec):
            self.parts.append(rec)
            self.buffered += len(rec)
            self.records += len(rec)
        if self.buffered >= self.chunk:
            self.flush()

    def flush(self):
        if not self.parts:
            return
        rec = np.concatenate(self.parts)
        rec = rec[np.argsort(rec[self.key], kind="stable")]
        i = len(self.chunks)
        base = self.folder.path / f"{self.name}_{i}"
        np.ascontiguousarray(rec[self.key], np.int64).tofile(f"{base}.key")
        rec.tofile(f"{base}.rec")
        self.chunks.append((base, int(rec[self.key][0]), int(rec[self.key][-1]), len(rec)))
        self.parts, self.buffered = [], 0

    def read(self, lo, hi) -> np.ndarray:
        self.flush()
        out = []
        for base, kmin, kmax, n in self.chunks:
            if kmax < lo or kmin >= hi:
                continue
            keys = np.memmap(f"{base}.key", np.int64, "r", shape=(n,))
            i0, i1 = np.searchsorted(keys, [lo, hi]).tolist()
            del keys
            if i1 > i0:
                out.append(np.fromfile(f"{base}.rec", self.dtype, i1 - i0, offset=i0 * self.dtype.itemsize))
        return np.concatenate(out) if out else np.zeros(0, self.dtype)
