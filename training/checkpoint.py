"""Checkpoints: real files, written atomically, verified before they are trusted.

ckpt_{step:06d}.pt holds model, optimizers, loader state, RNG states, step, resolved
config, the prepared corpus's identity and the SHA256 of the code files;
ckpt_{step:06d}.json (written after it) holds the checkpoint's own SHA256 and the run-time
facts that differ between equal runs (wall-clock times), so equal runs write equal .pt
files. A checkpoint whose bytes or sidecar do not verify is reported in one line and
`--resume` falls back to the previous good one (the queue, whose log has gone on past it,
re-executes the logged records after it: shardqueue/engine/starts.py). Pruning keeps the newest `keep`
checkpoints plus any step named in `protect` (train.py protects the final one).

Loading never runs code: everything is stored as tensors and plain Python values (numpy
arrays become tensors) and read with torch.load(weights_only=True). The sidecar's SHA256
sits beside the file it describes, so it detects damage, not a deliberate swap: whoever can
replace the checkpoint can replace its sidecar too.
"""
import hashlib
import io
import json
import random
from pathlib import Path

import numpy as np
import torch

from corpus.atomic import atomic_write_bytes, atomic_write_json, sha256_file
from errors import DataError

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("training", "loaders", "eval", "corpus", "errors", "audit", "presets", "protocols", "comparison",
             "records")


def code_sha256() -> dict:
    files = [ROOT / "train.py", ROOT / "prepare.py"] + sorted(p for d in CODE_DIRS for p in (ROOT / d).glob("*.py"))
    return {str(p.relative_to(ROOT)): sha256_file(p) for p in files if p.exists()}


def seed_host_rngs(seed: int) -> None:
    """Python's and numpy's global generators from the run's seed: a checkpoint stores their
    states, so two equal runs then write byte-equal checkpoints."""
    random.seed(seed)
    np.random.seed(seed % 2**32)


def data_identity(lay) -> dict:
    """The prepared corpus a run trains on: its build id and tokenizer SHA256 (prepared.json)."""
    rec = lay.prepared()
    return {"build_id": rec.get("build_id"), "tokenizer_sha256": rec.get("tokenizer_sha256")}


def data_mismatch(saved, now) -> str:
    """'' when a checkpoint's recorded corpus identity is `now`, else what differs."""
    if not isinstance(saved, dict):
        return "the checkpoint records no corpus identity (written by an older version)"
    diff = [k for k in ("build_id", "tokenizer_sha256") if saved.get(k) != now.get(k)]
    return f"{' and '.join(diff)} differ" if diff else ""


def rng_states():
    name, keys, pos, has_gauss, cached = np.random.get_state()
    st = {"python": random.getstate(), "torch": torch.get_rng_state(),
          "numpy": {"name": name, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                    "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_states(st):
    random.setstate(st["python"])
    n = st["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def plain(obj):
    """obj with numpy arrays as tensors and numpy scalars as Python numbers: what weights_only reads."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj).copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj)
    if isinstance(obj, str) and type(obj) is not str:  # torch.__version__ (a TorchVersion): weights_only refuses it
        return str(obj)
    return obj


def checkpoint_bytes(payload: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(plain(payload), buf)
    return buf.getvalue()


def save_checkpoint(out_dir, step, payload: dict, keep=2, protect=(), run_facts=None) -> Path:
    """run_facts (plain JSON: e.g. wall-clock times) go into the sidecar, not the .pt."""
    out_dir = Path(out_dir)
    data = checkpoint_bytes(payload)
    path = out_dir / f"ckpt_{step:06d}.pt"
    atomic_write_bytes(path, data)
    atomic_write_json(path.with_suffix(".json"), {"step": step, "sha256": hashlib.sha256(data).hexdigest(),
                                                   "bytes": len(data), "run_facts": run_facts or {}})
    if keep > 0:
        prunable = [p for p in sorted(out_dir.glob("ckpt_*.pt")) if checkpoint_step(p) not in set(protect)]
        for old in prunable[:-keep]:
            old.unlink()
            old.with_suffix(".json").unlink(missing_ok=True)
    return path


def checkpoint_step(path) -> int:
    try:
        return int(Path(path).stem.split("_", 1)[1])
    except (IndexError, ValueError):
        return -1


def load_checkpoint(path, map_location="cpu") -> dict:
    path = Path(path)
    meta = path.with_suffix(".json")
    if not path.exists():
        raise DataError(f"{path}: checkpoint not found")
    if not meta.exists():
        raise DataError(f"{path}: no {meta.name} beside it (incomplete write?)")
    try:
        want = json.loads(meta.read_text())
        want_bytes, want_sha = int(want["bytes"]), str(want["sha256"])
        facts = want.get("run_facts", {})
        if not isinstance(facts, dict):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise DataError(f"{meta}: unreadable or truncated checkpoint sidecar") from None
    data = path.read_bytes()
    if len(data) != want_bytes or hashlib.sha256(data).hexdigest() != want_sha:
        raise DataError(f"{path}: corrupt or truncated checkpoint ({len(data)} bytes, SHA256 does not match {meta.name})")
    try:
        payload = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as e:  # weights_only refuses any object it would have to construct by running code
        raise DataError(f"{path}: cannot be read as plain tensors and values ({type(e).__name__}); "
                        f"refused without running it") from None
    if not isinstance(payload, dict):
        raise DataError(f"{path}: not a checkpoint (a {type(payload).__name__}, not a dict)")
    return {**facts, **payload}


def newest_good_checkpoint(out_dir, log=print, skip=None):
    """(path, payload) of the newest checkpoint that verifies and that skip(path, payload), if given,
    does not turn down (skip returns a note to log and pass over it, or None to take it; it may
    raise), else (None, None)."""
    for path in sorted(Path(out_dir).glob("ckpt_*.pt"), reverse=True):
        try:
            payload = load_checkpoint(path)
        except DataError as e:
            log(f"warning: {e}; trying the previous checkpoint")
            continue
        note = skip(path, payload) if skip else None
        if note:
            log(note)
            continue
        return path, payload
    return None, None


def damaged_after(path) -> list:
    """The checkpoints newer than `path` (by step) that do not verify, oldest first: those newest_good_checkpoint
    warned of and passed over, not one it passed over for another reason (a final decay's)."""
    return sorted(q for q in Path(path).parent.glob("ckpt_*.pt") if q.name > Path(path).name and not _verifies(q))


def behind_damaged(path, log_seq, records, log_name):
    """A newer checkpoint than `path` that did not verify leaves `path`, written at record log_seq, behind a log of
    `records` records (a finished run's: nothing re-executes it). Said in one line, with what to do; it once read as
    a log and a checkpoint that do not belong together, which they do (a new user's probe)."""
    if log_seq is None or records <= log_seq:
        return
    damaged = damaged_after(path)
    if damaged:
        raise DataError(f"{damaged[-1]}: damaged, and the newest checkpoint that verifies, {Path(path).name}, was "
                        f"written at record {log_seq} of the {records} {log_name} holds: a resume from it would write "
                        f"records {log_seq + 1}-{records} again; restore the damaged checkpoint, or start the run "
                        "again with --fresh (this run is moved aside, not deleted)")


def _verifies(path):
    try:
        load_checkpoint(path)
        return True
    except DataError:
        return False
