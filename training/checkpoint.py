"""Checkpoints: real files, written atomically, verified before they are trusted.

ckpt_{step:06d}.pt holds model, optimizers, loader state, RNG states, step, resolved
config and the SHA256 of the code files; ckpt_{step:06d}.json (written after it) holds the
checkpoint's own SHA256. A checkpoint whose bytes or sidecar do not verify is reported in
one line and `--resume` falls back to the previous good one. Pruning keeps the newest
`keep` checkpoints plus any step named in `protect` (train.py protects the final one).
"""
import hashlib
import io
import json
import random
from pathlib import Path

import numpy as np
import torch

from corpus.atomic import atomic_write_bytes, atomic_write_json, sha256_file
from corpus.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("training", "loaders", "eval", "corpus", "audit", "protocols")


def code_sha256() -> dict:
    files = [ROOT / "train.py", ROOT / "prepare.py"] + sorted(p for d in CODE_DIRS for p in (ROOT / d).glob("*.py"))
    return {str(p.relative_to(ROOT)): sha256_file(p) for p in files if p.exists()}


def rng_states():
    st = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_states(st):
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def save_checkpoint(out_dir, step, payload: dict, keep=2, protect=()) -> Path:
    out_dir = Path(out_dir)
    buf = io.BytesIO()
    torch.save(payload, buf)
    data = buf.getvalue()
    path = out_dir / f"ckpt_{step:06d}.pt"
    atomic_write_bytes(path, data)
    atomic_write_json(path.with_suffix(".json"), {"step": step, "sha256": hashlib.sha256(data).hexdigest(),
                                                   "bytes": len(data)})
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
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise DataError(f"{meta}: unreadable or truncated checkpoint sidecar") from None
    data = path.read_bytes()
    if len(data) != want_bytes or hashlib.sha256(data).hexdigest() != want_sha:
        raise DataError(f"{path}: corrupt or truncated checkpoint ({len(data)} bytes, SHA256 does not match {meta.name})")
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
    except Exception as e:
        raise DataError(f"{path}: cannot be read ({type(e).__name__})") from None


def newest_good_checkpoint(out_dir, log=print):
    """(path, payload) of the newest checkpoint that verifies, or (None, None)."""
    for path in sorted(Path(out_dir).glob("ckpt_*.pt"), reverse=True):
        try:
            return path, load_checkpoint(path)
        except DataError as e:
            log(f"warning: {e}; trying the previous checkpoint")
    return None, None
