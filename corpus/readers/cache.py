"""Lengths computed once: a cache folder keyed by what decides them (the inputs' paths, sizes and SHA256s, the
format, columns, tokenizer, BOS policy and id, separator and dtype, the reader's version).

    CACHE/sha256.json          each input file's SHA256, remembered by (path, size, mtime, inode): an unchanged
                               file is not read again to be hashed (as make and rsync judge a file unchanged)
    CACHE/lengths-KEY/provenance.json   what the lengths are of
    CACHE/lengths-KEY/units/N.npz       each unit's result, written atomically as it finishes: a pass that is
                                        interrupted resumes from the units it finished
    CACHE/lengths-KEY/lengths.npz       the whole result, written last: a rerun reads it and does no work
"""
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_bytes, atomic_write_json, sha256_file
from corpus.errors import DataError
from corpus.readers.result import CorpusLengths
from corpus.readers.units import UnitResult

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

    def save(self):
        if self.path and self.dirty:
            atomic_write_json(self.path, self.known)
            self.dirty = False


def key_of(provenance) -> str:
    return hashlib.sha256(json.dumps(provenance, sort_keys=True).encode()).hexdigest()[:20]


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _text(a) -> str:
    return bytes(np.asarray(a, np.uint8)).decode("utf-8")


def _as_bytes(obj) -> np.ndarray:
    return np.frombuffer(json.dumps(obj).encode("utf-8"), np.uint8)


class LengthCache:
    """The cache folder of one provenance key (nothing is written without a folder)."""

    def __init__(self, folder, key_fields):
        self.key_fields = json.loads(json.dumps(key_fields))  # as JSON gives it back: lists, not tuples
        self.dir = Path(folder) / f"lengths-{key_of(self.key_fields)}" if folder else None

    def final(self):
        """The cached CorpusLengths, or None."""
        if not self.dir or not (self.dir / "lengths.npz").is_file():
            return None
        try:
            prov = json.loads((self.dir / "provenance.json").read_text())
            if any(prov.get(k) != v for k, v in self.key_fields.items()):
                return None
            with np.load(self.dir / "lengths.npz", allow_pickle=False) as z:
                names = json.loads(_text(z["label_names"]))
                codes = z["label_codes"]
                table = np.empty(len(names), object)
                table[:] = names
                return CorpusLengths(z["lengths"], table[codes], z["doc_file"], z["doc_row"], json.loads(
                    _text(z["files"])), prov, cached=True, cache_dir=str(self.dir), label_names=names,
                    label_codes=codes)
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            return None  # a damaged cache is recomputed, not trusted

    def unit(self, i):
        """A unit's cached result, or None."""
        f = self.dir / "units" / f"{i}.npz" if self.dir else None
        if not f or not f.is_file():
            return None
        try:
            with np.load(f, allow_pickle=False) as z:
                names = json.loads(_text(z["names"]))
                codes = z["codes"] if z["has_codes"] else None
                return UnitResult(z["lengths"], codes, names, int(z["trailing"]))
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            return None

    def start(self):
        """The folder and its provenance.json, before any unit (a folder from another key is never reused)."""
        if self.dir:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not (self.dir / "provenance.json").is_file():
                atomic_write_json(self.dir / "provenance.json", self.key_fields)

    def save_unit(self, i, r):
        if self.dir:
            has = r.codes is not None
            atomic_write_bytes(self.dir / "units" / f"{i}.npz", _npz(
                lengths=r.lengths, codes=r.codes if has else np.zeros(0, np.int32), has_codes=np.array(has),
                names=_as_bytes(r.names), trailing=np.array(r.trailing)))

    def save(self, result):
        """The whole result, then its provenance; the unit files are dropped once it is written."""
        if not self.dir:
            return
        atomic_write_bytes(self.dir / "lengths.npz", _npz(
            lengths=result.lengths, doc_file=result.doc_file, doc_row=result.doc_row, label_codes=result.label_codes,
            label_names=_as_bytes(result.label_names), files=_as_bytes(result.files)))
        atomic_write_json(self.dir / "provenance.json", result.provenance)
        units = self.dir / "units"
        if units.is_dir():
            for f in units.iterdir():
                os.unlink(f)
            units.rmdir()
        result.cache_dir = str(self.dir)
