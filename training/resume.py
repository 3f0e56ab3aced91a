"""Checkpoint and resume of a training process: one component for train.py and the queue.

A checkpoint holds the process's state by part: the model and both optimizers (the trainer's
state_dict), the loader's position (train.py: one per rank), every random generator, the step,
and where the run's log stands (train.py: train_log.jsonl up to that step; the queue: log_seq and
the records it still owes its decision log). training/checkpoint.py writes the files atomically,
verifies them before they are trusted and prunes them.

The rules, in one place:
  start_guard         a folder holds one run: without resume a folder holding a run is refused, or
                      with overwrite moved aside whole; torn temporary writes are removed
  check_resumable     a checkpoint resumes only under its config, its prepared corpus and (unless
                      allowed, and then recorded) its code
  kept_log_lines      the log lines up to the resumed step; the torn last line of a kill is dropped
and the resume point is checkpoint.newest_good_checkpoint: the newest that verifies (and that the
caller accepts: the queue passes over a final decay's unfinished checkpoint).
"""
import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import training.checkpoint as files  # the module, so a test can stand in changed code for code_sha256
from corpus.atomic import atomic_write_text
from errors import DataError
from training.config import SCORE_KEYS, config_sha256, resume_differences

RUN_FILES = ("train_log.jsonl", "summary.json", "official_rows.parquet")


# ---- the state parts -----------------------------------------------------------------
def trainer_state(trainer, copied=False) -> dict:
    """{"trainer": model and optimizers, "rng": every generator}: the tensors-and-RNG part of a state
    (copied: a deep copy, for an in-memory rollback point that later updates must not touch)."""
    st = trainer.state_dict()
    return {"trainer": copy.deepcopy(st) if copied else st, "rng": files.rng_states()}


def restore_trainer_state(trainer, state, copied=False) -> None:
    trainer.load_state_dict(copy.deepcopy(state["trainer"]) if copied else state["trainer"])
    files.set_rng_states(state["rng"])


def new_clock() -> dict:
    """Times carried across resumes: timed (after warm-up), all updates, loader waits, earlier processes."""
    return {"timed_seconds": 0.0, "timed_updates": 0, "update_seconds": 0.0, "loader_wait_seconds": 0.0,
            "earlier_process_seconds": 0.0}


@dataclass
class Progress:
    """Where a training run stands besides its tensors: carried from checkpoint to checkpoint."""
    step: int = 0
    train_loss: float | None = None
    clock: dict = field(default_factory=new_clock)
    allowed_code_changes: list = field(default_factory=list)


def save_run(out, cfg, ident, trainer, loader_states, progress: Progress, t_start):
    """train.py's checkpoint at progress.step: the trainer's parts, each rank's loader, RNG, step, the
    config, corpus and code it ran under; the wall clock goes to the sidecar (equal runs, equal files)."""
    payload = {**trainer.state_dict(), "loader": loader_states if len(loader_states) > 1 else loader_states[0],
               "rng": files.rng_states(), "step": progress.step, "train_loss": progress.train_loss,
               "config": cfg.to_dict(), "config_sha256": config_sha256(cfg.to_dict()), "code_sha256": files.code_sha256(),
               "data": ident, "allowed_code_changes": progress.allowed_code_changes}
    clock = {**progress.clock,
             "earlier_process_seconds": progress.clock["earlier_process_seconds"] + time.time() - t_start}
    files.save_checkpoint(out, progress.step, payload, keep=cfg.keep_checkpoints, protect=(cfg.updates,),
                          run_facts={"clock": clock})


def restore_run(payload, trainer, loader, rank, allowed_code_changes) -> Progress:
    """The parts of a train.py checkpoint put back: trainer, this rank's loader, RNG; its progress."""
    trainer.load_state_dict(payload)
    loaders = payload["loader"]
    loader.load_state_dict(loaders[rank] if isinstance(loaders, list) else loaders)
    files.set_rng_states(payload["rng"])
    return Progress(step=payload["step"], train_loss=payload.get("train_loss"),
                    clock={**new_clock(), **payload.get("clock", {})}, allowed_code_changes=allowed_code_changes)


# ---- the rules ----------------------------------------------------------------------
def holds_a_run(out: Path) -> bool:
    return any((out / n).exists() for n in RUN_FILES) or any(out.glob("ckpt_*.pt"))


def remove_torn_writes(out, log=print):
    """Temporary files of a killed atomic write are removed on the next start (the caller holds the
    folder's lock, so no writer owns them)."""
    for p in sorted(Path(out).glob(".*.tmp")):
        p.unlink()
        log(f"removed {p.name}, left by an interrupted write")


def start_guard(out: Path, resume, overwrite, log):
    """Never mix two runs in one folder: without resume a folder holding a run is refused, or with
    overwrite moved aside whole (to OUT.replaced-N) first."""
    if resume and overwrite:
        raise DataError("--resume and --overwrite exclude each other")
    if not resume and holds_a_run(out):
        if not overwrite:
            raise DataError(f"{out}: already holds a run; use --resume to continue it or --overwrite to move it "
                            f"aside and start again")
        n = 1
        while out.with_name(f"{out.name}.replaced-{n}").exists():
            n += 1
        aside = out.with_name(f"{out.name}.replaced-{n}")
        aside.mkdir()
        for p in sorted(out.iterdir()):
            if p.name != ".lock":
                p.rename(aside / p.name)
        log(f"moved the previous run in {out} aside to {aside}")
    remove_torn_writes(out, log)


def finished_run(out: Path, cfg):
    """A finished run's summary (it is reported, never rewritten), or None; refused when it finished
    under another config."""
    summary_path = out / "summary.json"
    if not summary_path.exists():
        return None
    try:
        done = json.loads(summary_path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{summary_path}: unreadable; move it aside to score the final checkpoint again") from None
    diff = resume_differences(done.get("config", {}), cfg)
    if diff:
        raise DataError(f"{out}: finished under another config (differs in {', '.join(diff)})")
    return done


def code_changes(payload) -> list:
    saved, now = payload.get("code_sha256") or {}, files.code_sha256()
    return sorted(f for f in set(saved) | set(now) if saved.get(f) != now.get(f))


def check_resumable(path, payload, cfg, ident, allow_code_change, log) -> list:
    """Refuse a checkpoint of another config, corpus or (unless allowed) code; returns the list of
    allowed code changes so far (recorded in later checkpoints and the summary)."""
    diff = resume_differences(payload.get("config", {}), cfg)
    if diff:
        why = (f"; {', '.join(k for k in diff if k in SCORE_KEYS)} set the rows the official score is on, and a "
               f"resumed run keeps its own" if set(diff) & set(SCORE_KEYS) else "")
        raise DataError(f"{path}: written under another config; refusing to resume (differs in {', '.join(diff)}){why}")
    why = files.data_mismatch(payload.get("data"), ident)
    if why:
        raise DataError(f"{path}: written on another prepared corpus ({why}); refusing to resume")
    allowed = list(payload.get("allowed_code_changes") or [])
    changed = code_changes(payload)
    if changed and not allow_code_change:
        raise DataError(f"{path}: the code changed since this checkpoint ({', '.join(changed[:4])}"
                        f"{' …' if len(changed) > 4 else ''}); refusing to resume (--allow-code-change to continue "
                        f"anyway, recorded in the run)")
    if changed:
        log(f"warning: resuming under changed code ({', '.join(changed)}), as --allow-code-change asks; recorded")
        allowed.append({"step": int(payload.get("step", 0)), "files": changed})
    return allowed


def kept_log_lines(log_path: Path, step) -> list:
    """Log lines up to the resumed update: an interrupted run may have logged past it, and a kill
    mid-write leaves a torn last line, which is dropped."""
    if not step or not log_path.exists():
        return []
    lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    kept = []
    for i, ln in enumerate(lines):
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # the torn last line of a killed write
            raise DataError(f"{log_path}: line {i + 1} is not JSON (edited?); refusing to resume") from None
        if isinstance(rec, dict) and isinstance(rec.get("step"), int) and rec["step"] <= step:
            kept.append(ln)
    return kept


def trim_log(log_path: Path, step) -> None:
    """The log rewritten to the lines up to step (an empty log for a fresh start)."""
    atomic_write_text(log_path, "".join(ln + "\n" for ln in kept_log_lines(log_path, step)))
