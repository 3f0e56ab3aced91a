"""A run folder's files and what they must agree with: the files a run writes (moved aside, never deleted, by
--fresh), plain-tensor states with their SHA256 (the calibrated state, a seed's cached start state), the
folders and corpus a start record names, and the checks a resume makes against the start record and the
newest checkpoint."""
import json
import os
import shutil
import time
from pathlib import Path

import torch

from corpus.atomic import atomic_write_bytes, sha256_file
from corpus.layout import Layout, default_data_dir
from errors import DataError
from shardqueue.engine.plan import RECORDED_WHEN_SET
from shardqueue.engine.start_record import settings_differences
from shardqueue.world.rotation import load_rotation, save_rotation
from training.checkpoint import behind_damaged, checkpoint_bytes, data_identity, newest_good_checkpoint
from training.config import config_sha256

RUN_FILES = ("decisions.jsonl", "decisions.jsonl.torn", "ckpt_*", "rotation_v*", "final.*", "report.md",
             "decisions.parquet", "decisions.csv", "queue_summary.json", "control_curves.png", "inspection",
             "start_state.pt", "start_state.json", "added_sources.json*", "reexecution.json",
             "reexecution_partial.json")
START_KEY = "start_state.json"


def write_state(path, payload):
    atomic_write_bytes(path, checkpoint_bytes(payload))
    return sha256_file(path)


def read_state(path, want_sha):
    if not Path(path).exists():
        raise DataError(f"{path}: not found")
    if sha256_file(path) != want_sha:
        raise DataError(f"{path}: SHA256 does not match its record (changed or truncated)")
    try:  # plain tensors and values only: loading runs no code
        return torch.load(path, weights_only=True)
    except Exception as e:
        raise DataError(f"{path}: cannot be read as plain tensors and values ({type(e).__name__}); "
                        f"refused without running it") from None


def corpus_identity(cfg):
    return data_identity(Layout(cfg.data_dir or default_data_dir(), cfg.source))


def start_state_key(cfg, calib, seed) -> dict:
    """What a cached start state depends on: the seed, the config, the calibration's pool and the corpus."""
    return {"seed": int(seed), "config_sha256": config_sha256({**cfg.to_dict(), "seed": int(seed)}),
            "pool_sha256": calib["pool_sha256"], "calibrated_state_sha256": calib.get("state_sha256"),
            "corpus": corpus_identity(cfg)}


def cached_start_state(folder, key):
    """The start state cached in folder, if its record names this key and its SHA256 matches; else None."""
    folder = Path(folder)
    try:
        rec = json.loads((folder / START_KEY).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("key") != key or not (folder / "start_state.pt").exists():
        return None
    try:
        return read_state(folder / "start_state.pt", rec.get("sha256"))
    except DataError:
        return None


def copy_start_state(src_state, src_key, dst_dir):
    """Copy a cached start state and its key record into dst_dir, each atomically, the record last."""
    dst_dir = Path(dst_dir)
    (dst_dir / START_KEY).unlink(missing_ok=True)  # no record describes a half-copied state
    atomic_write_bytes(dst_dir / "start_state.pt", Path(src_state).read_bytes())
    atomic_write_bytes(dst_dir / START_KEY, Path(src_key).read_bytes())


def relative_dir(folder, out):
    """A folder as the run records it: relative to the run folder, so a copied run checks itself."""
    return os.path.relpath(Path(folder).resolve(), Path(out).resolve())


def freeze_rotation(out, r, manifest):
    """(path, SHA256) of rotation r's frozen manifest in the run folder: written once; a rotation that exists
    (a resumed run replays its boundary) must be the very same."""
    path = Path(out) / f"rotation_v{r}.json"
    if not path.exists():
        return path, save_rotation(path, manifest)
    old = load_rotation(path)
    old.pop("_sha256")
    if old != manifest:
        raise DataError(f"{path}: an active rotation manifest cannot be changed (it differs from the replay)")
    return path, (Path(out) / f"rotation_v{r}.json.sha256").read_text().split()[0]


def check_start_record(start, runner, log_path):
    """Resume refuses any difference from the run's start record: the run plan (seed, policy, rate, budget,
    rotation length, branch check, and the in-queue decay, fixed positions and curves where set), calibration,
    pool, corpus, and each key of the calibration folder's config.json and calibration.json (named)."""
    now = {"calibration": {k: runner.calib.get(k) for k in ("k", "frac", "sigma")},
           "pool_sha256": runner.pool["_sha256"], "corpus": runner.corpus}
    diff = plan_differences(start, runner.plan) + [_then_now(k, start.get(k), now[k]) for k in now
                                                   if start.get(k) != now[k]]
    diff += settings_differences(start, runner.cfg, runner.calib)
    if diff:
        raise DataError(f"{log_path}: the run started with another {', '.join(diff)}; refusing to resume "
                        f"(resume with the start record's settings, or start a new run)")


def plan_differences(start, plan) -> list:
    """The fields of a run plan that differ from those a start record holds, each named (_then_now)."""
    now = dict.fromkeys(RECORDED_WHEN_SET) | plan.recorded()  # a field not set is absent from the record
    return [_then_now(k, start.get(k), now[k]) for k in now if start.get(k) != now[k]]


def _then_now(key, then, now):
    """A differing plan field, with both values where they are short (a seed, a budget): `run --resume` without the
    --budget-targets the run started with is refused, and the line says which budget to give."""
    short = all(isinstance(v, (bool, int, float, str, type(None))) and len(repr(v)) <= 24 for v in (then, now))
    return f"{key} ({then!r} when the run started, {now!r} now)" if short else key


def check_finished_log(out, recs):
    """A log ending in "done" is complete only if the newest checkpoint holds that very record."""
    path, p = newest_good_checkpoint(out, log=lambda s: None)
    if p is not None:
        behind_damaged(path, p.get("log_seq"), len(recs), "decisions.jsonl")
    if p is not None and p.get("run_id") != recs[0].get("run_id"):
        raise DataError(f"{path}: belongs to run {p.get('run_id')}, but decisions.jsonl is run {recs[0].get('run_id')}")
    if p is None or p.get("log_seq") != len(recs) or (p.get("records") or [{}])[-1] != recs[-1]:
        raise DataError(f"{out / 'decisions.jsonl'}: ends in 'done' but the newest checkpoint does not hold it; "
                        f"the log and the checkpoint do not belong together")


def move_aside(out, keep):
    """Move a previous run's files into out/previous/<time>/ (never delete them); keep="calibration" moves only
    a run's files, leaving a calibration in the folder."""
    out = Path(out)
    dest = out / "previous" / time.strftime("%Y%m%dT%H%M%S")
    names = RUN_FILES if keep == "calibration" else ("*",)
    moved = []
    for pat in names:
        for p in sorted(out.glob(pat)):
            if p.name in ("previous", ".lock"):
                continue
            dest.mkdir(parents=True, exist_ok=True)
            shutil.move(str(p), str(dest / p.name))
            moved.append(p.name)
    return dest, moved
