"""Lengths computed once: a cache folder keyed by what decides them (the inputs' paths, sizes and SHA256s, the
format, columns, tokenizer, BOS policy and id, separator and dtype, the reader's version).

    CACHE/sha256.json          each input file's SHA256, remembered by (path, size, mtime, inode): an unchanged
                               file is not read again to be hashed (as make and rsync judge a file unchanged)
    CACHE/lengths-KEY/provenance.json   what the lengths are of
    CACHE/lengths-KEY/units/N.*         each unit's result, written atomically as it finishes: a pass that is
                                        interrupted resumes from the units it finished
    CACHE/lengths-KEY/lengths.npy ...   the whole result (result.json written last): a rerun reads it, no work
"""
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from console.progress import bar
from corpus.atomic import atomic_file, atomic_write_json, sha256_file
from corpus.readers.result import CorpusLengths
from corpus.readers.units import UnitResult
from errors import DataError

READER_VERSION = 1  # raised when a reader's counting changes: older cached lengths are then not reused
HASHES = "sha256.json"


def check_folder(folder):
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise DataError(f"cache {folder}: is a file, not a folder")


class HashMemo:
    """SHA256s of files, remembered in the cache folder (or for this call only, without one)."""

    def __init__(self, folder=None):
        self.path = Path(folder) / HASHES if folder else None
        self.known, self.dirty = {}, False
        if self.path and self.path.is_file():
            try:
                self.known = json.loads(self.path.read_text())
            except (ValueError, UnicodeDecodeError):
                self.known = {}  # a damaged memo only costs the hashing again

    def record(self, path, read=True) -> dict:
        """{"path", "bytes", "sha256"}; sha256 None for a file only stat-ed (read=False)."""
        p = Path(path).absolute()
        try:
            st = p.stat()
        except OSError as e:
            raise DataError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
        rec = {"path": str(p), "bytes": st.st_size, "sha256": None}
        if read:
            stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
            got = self.known.get(str(p))
            if got and got[:3] == stamp:
                rec["sha256"] = got[3]
            else:
                try:
                    rec["sha256"] = sha256_file(p)
                except OSError as e:
                    raise DataError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
                self.known[str(p)] = stamp + [rec["sha256"]]
                self.dirty = True
        return rec

    def records(self, wanted, threads, progress=True):
        """record(path, read) of each (path, read) in `wanted`, in order; the files not yet known hashed side by
        side (hashlib lets go of the GIL over a large buffer), with a bar over their bytes."""
        todo = [p for p, read in wanted if read and not self._known(p)]
        if todo:
            total = sum(Path(p).stat().st_size for p in todo if Path(p).is_file())
            with bar(total=total, unit="B", unit_scale=True, desc="SHA256 of the inputs", disable=not progress,
                     leave=False) as b, ThreadPoolExecutor(max(1, min(threads, len(todo)))) as ex:
                for p, _ in zip(todo, ex.map(self.record, todo)):
                    b.update(Path(p).stat().st_size)
        return [self.record(p, read) for p, read in wanted]

    def _known(self, path):
        p = Path(path).absolute()
        try:
            st = p.stat()
        except OSError:
            return False  # record() says why, in one line
        got = self.known.get(str(p))
        return bool(got) and got[:3] == [st.st_size, st.st_mtime_ns, st.st_ino]

    def save(self):
        if self.path and self.dirty:
            atomic_write_json(self.path, self.known)
            self.dirty = False


def key_of(provenance) -> str:
    return hashlib.sha256(json.dumps(provenance, sort_keys=True).encode()).hexdigest()[:20]


def _save_array(path, arr):
    """np.save straight into the atomic file (a corpus's lengths are tens of megabytes: no copy in memory first)."""
    with atomic_file(path) as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)


def _narrow(a):
    """The array in the smallest unsigned type that holds it (lengths and label codes are never negative): a
    corpus of short documents and few labels is written in a quarter of the bytes."""
    top = int(a.max()) if len(a) else 0
    return a.astype(next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if top <= np.iinfo(t).max))


def _load(path):
    return np.load(path, allow_pickle=False)


class LengthCache:
    """The cache folder of one provenance key (nothing is written without a folder). A unit's files are
    units/N.npy (lengths), units/N.codes.npy (labels) and units/N.json (label names; written last: the unit is
    there when it is); the whole result's are lengths.npy, label_codes.npy and result.json, written last."""

    def __init__(self, folder, key_fields):
        self.key_fields = json.loads(json.dumps(key_fields))  # as JSON gives it back: lists, not tuples
        self.dir = Path(folder) / f"lengths-{key_of(self.key_fields)}" if folder else None

    def final(self):
        """The cached CorpusLengths, or None."""
        if not self.dir or not (self.dir / "result.json").is_file():
            return None
        try:
            prov = json.loads((self.dir / "provenance.json").read_text())
            if any(prov.get(k) != v for k, v in self.key_fields.items()):
                return None
            meta = json.loads((self.dir / "result.json").read_text())
            lengths = _load(self.dir / "lengths.npy").astype(np.int64)
            codes = _load(self.dir / "label_codes.npy").astype(np.int32)
            counts = np.asarray(meta["documents_per_file"], np.int64)
            if counts.sum() != len(lengths) or len(codes) != len(lengths):
                return None
            doc_file = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
            doc_row = np.arange(len(lengths), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            return CorpusLengths(lengths, codes, meta["label_names"], doc_file, doc_row, meta["files"], prov,
                                 cached=True, cache_dir=str(self.dir))
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None  # a damaged cache is recomputed, not trusted

    def unit(self, i):
        """A unit's cached result, or None."""
        if not self.dir or not (self.dir / "units" / f"{i}.json").is_file():
            return None
        try:
            meta = json.loads((self.dir / "units" / f"{i}.json").read_text())
            lengths = _load(self.dir / "units" / f"{i}.npy")
            codes = _load(self.dir / "units" / f"{i}.codes.npy") if meta["has_codes"] else None
            return UnitResult(lengths, codes, meta["names"], int(meta["trailing"]), bos_first=meta["bos_first"])
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None

    def start(self):
        """The folder and its provenance.json, before any unit (a folder from another key is never reused)."""
        if self.dir:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not (self.dir / "provenance.json").is_file():
                atomic_write_json(self.dir / "provenance.json", self.key_fields)

    def save_unit(self, i, r):
        if self.dir:
            units = self.dir / "units"
            _save_array(units / f"{i}.npy", r.lengths)
            if r.codes is not None:
                _save_array(units / f"{i}.codes.npy", r.codes)
            atomic_write_json(units / f"{i}.json", {"has_codes": r.codes is not None, "names": r.names,
                                                    "trailing": r.trailing, "bos_first": r.bos_first})

    def save(self, result, per_file):
        """The whole result, then its provenance; the unit files are dropped once it is written."""
        if not self.dir:
            return
        _save_array(self.dir / "lengths.npy", _narrow(result.lengths))
        _save_array(self.dir / "label_codes.npy", _narrow(result.label_codes))
        atomic_write_json(self.dir / "provenance.json", result.provenance)
        atomic_write_json(self.dir / "result.json", {"files": result.files, "label_names": result.label_names,
                                                     "documents_per_file": per_file})
        units = self.dir / "units"
        if units.is_dir():
            for f in units.iterdir():
                os.unlink(f)
            units.rmdir()
        result.cache_dir = str(self.dir)
