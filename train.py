#!/usr/bin/env python3
"""The training core: the supplied model and optimizer on one of the four packers.

  python train.py --config protocols/configs/paper/baseline_s43.json --dry-run
  python train.py --config CONFIG.json [key=value ...] [--out DIR] [--resume]
  torchrun --nproc_per_node=N train.py --config CONFIG.json        # DDP (NCCL / Gloo)

Overrides are key=value pairs over the config's keys (an unknown key or a value out of
range is an error). A run holds an exclusive lock on --out and writes there:
train_log.jsonl (one line per update, with a fingerprint of every microbatch it trained),
checkpoints every checkpoint_every updates (default 100; the newest keep_checkpoints plus
the final one are kept; atomic, verified, see training/checkpoint.py), summary.json with
the official score (eval/official.py) and row-level sufficient statistics. What a checkpoint
holds and when a resume is refused: training/resume.py, shared with the queue.

--resume continues from the newest checkpoint that verifies and gives bitwise the
parameters of an uninterrupted run on CPU. It refuses a checkpoint written under another
config (naming the keys; only run-time keys such as device, checkpoint_every may differ; the
official score's eval_batches, eval_rows, eval_buffer may not), on
another prepared corpus or tokenizer (build id and tokenizer SHA256 are in every
checkpoint), or under changed code (unless --allow-code-change, which the run records),
and on a finished run it says so and changes nothing. Without --resume a folder that
already holds a run is refused; --overwrite first moves that run aside to a sibling
folder OUT.replaced-N.

Timing: "timed" seconds leave out the first 11 updates of every process (compilation and
warm-up), as the baseline's training time does (`step > 10`); "total" seconds count everything.
"""
import argparse
import faulthandler
import gc
import json
import math
import os
import resource
import shlex
import signal
import sys
import time
from pathlib import Path


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="JSON config (keys: see training/config.py TrainConfig). Without it the keys "
                    "start from TrainConfig's defaults, the paper's 50M-parameter model, changed by the key=value "
                    "pairs; the run then names the model it builds")
    ap.add_argument("overrides", nargs="*", help="key=value overrides, e.g. updates=20 seed=44 loader=lossless")
    ap.add_argument("--out", default=None, help="run folder (default runs/<name>)")
    ap.add_argument("--dry-run", action="store_true", help="print config, parameters, FLOPs and planned targets; touch no data")
    ap.add_argument("--resume", action="store_true", help="continue from the newest good checkpoint in --out")
    ap.add_argument("--overwrite", action="store_true",
                    help="--out holds a run: move it aside to OUT.replaced-N and start again")
    ap.add_argument("--allow-code-change", action="store_true",
                    help="with --resume: continue although the code changed since the checkpoint (recorded)")
    return ap


def missing_config(a):
    """Training needs a config (a file or key=value pairs): with neither, the defaults are the paper's
    50M-parameter model, hours on a CPU."""
    if a.config or a.overrides or a.dry_run:
        return None
    return ("error: no --config given; pass one, e.g. python train.py --config protocols/configs/tiny/baseline_s43.json "
            "(--dry-run shows the paper's defaults)")


if __name__ == "__main__":  # --help and a missing --config are answered before torch's import (seconds)
    _early = build_parser().parse_intermixed_args()  # key=value pairs may stand anywhere
    if missing_config(_early):
        print(missing_config(_early), file=sys.stderr)
        sys.exit(2)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from console.progress import bar as tqdm  # noqa: E402
from console.shutdown import skip_final_collections  # noqa: E402
from corpus.atomic import atomic_write_json, sha256_file  # noqa: E402
from corpus.layout import Layout, default_data_dir  # noqa: E402
from corpus.pretokenize import shard_paths  # noqa: E402
from corpus.runlock import FolderLocked, folder_lock  # noqa: E402
from corpus.tokenizer import bos_id, load_encoding, load_token_bytes  # noqa: E402
from errors import DataError, os_error_line  # noqa: E402
from eval.official import row_statistics, score_fixed_shape, scores, write_stats  # noqa: E402
from loaders.batches import MicrobatchLoader  # noqa: E402
from loaders.packers import Packer  # noqa: E402
from loaders.stream import DocumentStream, open_split  # noqa: E402
from training import device as devices  # noqa: E402
from training.checkpoint import data_identity, newest_good_checkpoint, seed_host_rngs  # noqa: E402
from training.config import TrainConfig, config_sha256, for_world_size, resolve_config  # noqa: E402
from training.mfu import peak_flops  # noqa: E402
from training.resume import (  # noqa: E402
    Progress,
    check_resumable,
    finished_run,
    holds_a_run,
    kept_log_lines,
    restore_run,
    save_run,
    start_guard,
    trim_log,
)
from training.trainer import Trainer, TrainingDiverged, model_config  # noqa: E402

WARMUP_UPDATES = 11  # as the baseline's training time (`step > 10`): updates 1-11 (compile, warm-up) are not timed
CURVE_POINTS = 10  # validation points per run for the learning curves (command line and run_six)
CURVE_BATCHES = 2  # official-stream batches per point: the same fixed rows every time


def dry_run(cfg: TrainConfig):
    mc = model_config(cfg)  # counted from the model's shapes: nothing is built
    n, fpt = mc.parameter_counts()[0], mc.flops_per_token()
    targets = cfg.updates * cfg.targets_per_update
    info = {"parameters": n, "flops_per_token": fpt, "targets": targets, "updates": cfg.updates,
            "flops_per_run": fpt * targets, "config": cfg.to_dict()}
    print(json.dumps(cfg.to_dict(), indent=2))
    print(f"parameters      {n:,}")
    print(f"FLOPs per token {fpt:,}")
    print(f"planned targets {targets:,} = {cfg.updates} updates x {cfg.targets_per_update:,}")
    print(f"FLOPs per run   {fpt * targets:.6g}")
    return info


def training_stream(cfg, data_dir):
    """The train split, or the shards named in cfg.train_shards, or the documents listed in cfg.train_docs."""
    if not cfg.train_shards and not cfg.train_docs:
        return open_split(data_dir, cfg.source, "train").capped(cfg.max_source_len)
    lay = Layout(data_dir, cfg.source)
    names = lay.shard_names("train")
    if cfg.train_shards:
        want = [n.strip().removesuffix(".parquet") for n in cfg.train_shards.split(",") if n.strip()]
        unknown = [n for n in want if n not in names]
        if unknown:
            raise DataError(f"config key 'train_shards': {', '.join(unknown)} not among the training shards")
        names = want
    stream = DocumentStream.from_shards(lay.tokens, names, bos=bos_id(load_encoding(lay.tokenizer)))
    if cfg.train_docs:
        try:
            idx = [int(x) for x in open(cfg.train_docs).read().split()]
        except (OSError, ValueError) as e:
            raise DataError(f"{cfg.train_docs}: cannot read document indices ({type(e).__name__})") from None
        stream = stream.subset(idx)
    return stream.capped(cfg.max_source_len)


def world_config(cfg):
    """cfg resolved for torchrun's WORLD_SIZE (training/config.py for_world_size), before any
    config comparison, so a resumed or finished run compares what it trained with."""
    return for_world_size(cfg, int(os.environ.get("WORLD_SIZE", 1)))


def dist_setup():
    if "RANK" not in os.environ:
        return 0, 1, 0
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))


def reset_peak_memory(device):
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return
    # Linux: "5" resets this process's peak resident set size (VmHWM), so each run reports its own
    # peak; that includes heap kept from earlier work in the process (training/device.py)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_memory_mib(device):
    """CUDA: peak allocated; CPU: peak resident set size since reset_peak_memory (Linux), else since start."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check_token_files(data_dir, source, names):
    """A .tokens.bin shorter or longer than its offsets say is named in one line before any use."""
    lay = Layout(data_dir, source)
    for n in names:
        p = shard_paths(lay.tokens, n)
        if not p["offsets"].exists() or not p["tokens"].exists():
            continue  # TokenShard names the missing shard
        try:
            want = 2 * int(np.load(p["offsets"])[-1])
        except (ValueError, IndexError, OSError):
            raise DataError(f"{p['offsets']}: unreadable document offsets") from None
        have = p["tokens"].stat().st_size
        if have != want:
            raise DataError(f"{p['tokens']}: {have:,} bytes, its offsets need {want:,} (truncated or altered; "
                            f"rerun prepare.py)")


def compact_config(cfg: TrainConfig) -> str:
    d = cfg.to_dict()
    return f"config {config_sha256(d)[:12]}: " + " ".join(f"{k}={d[k]}" for k in sorted(d))


def finite_or_none(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def train(cfg: TrainConfig, out_dir, resume=False, stop_after=None, log=print, curve_points=0, overwrite=False,
          allow_code_change=False, collect_garbage=False):
    """Train cfg.updates updates (or stop_after of them, to simulate an interruption); curve_points > 0
    logs that many validation BPB points for the learning curves (the command line and run_six do).
    collect_garbage: collect the process's garbage before the first update's objects are frozen, as the
    baseline does (the command line, a torchrun rank, run_six's configs one after another: a run's leftovers,
    GPU tensors among them, must not stay frozen through the next); a library caller may skip it. A caller
    that froze objects of its own (gc.freeze) keeps its collector as it set it: the run collects, freezes and
    unfreezes nothing."""
    rank = int(os.environ.get("RANK", 0))
    out = Path(out_dir)
    if rank != 0:
        return _train(cfg, out, resume, stop_after, log, curve_points, allow_code_change, collect_garbage)
    made = missing_top(out)  # the first folder this run would make on the way to out, or None
    try:
        with folder_lock(out, "a training run"):
            if overwrite and not resume and holds_a_run(out):
                check_start(cfg)  # a config that cannot start leaves the run it would replace where it is
            start_guard(out, resume, overwrite, log)
            return _train(cfg, out, resume, stop_after, log, curve_points, allow_code_change, collect_garbage)
    except FolderLocked as e:
        raise DataError(str(e)) from None
    except DataError:  # refused before it wrote anything (a data root not prepared): no empty folder left behind
        remove_empty(out, made)
        raise


def missing_top(out):
    """The outermost folder on the way to out that does not exist yet (the lock makes it and those below), or None."""
    top = None
    for f in (out, *out.absolute().parents):
        if f.exists():
            return top
        top = f
    return top


def remove_empty(out, top):
    """The folders a refused start made, from out up to top, each only while empty."""
    if top is None:
        return
    f = out.absolute()
    while f.is_dir() and not any(f.iterdir()):
        f.rmdir()
        if f == top.absolute():
            return
        f = f.parent


def check_start(cfg):
    """What a start refuses before its first update (the device, the prepared corpus against the config, the
    training shards or documents), asked before --overwrite moves an earlier run aside: a typo'd data_dir, vocab or
    train_shards is refused with the earlier run still in --out."""
    cfg = world_config(cfg)
    devices.resolve_device(cfg.device, "config key 'device'")
    data_dir = cfg.data_dir or str(default_data_dir())
    check_data(cfg, data_dir)
    training_stream(cfg, data_dir)


def curve_probe(cfg, data_dir, device, autocast, points=CURVE_POINTS):
    """probe(fwd, step) -> validation BPB on the official stream's first CURVE_BATCHES batches at
    `points` evenly spaced updates (else None). Training losses sample different rows per
    condition, so only a fixed evaluation set makes the conditions' curves comparable. The rows
    are packed once and scored at every point."""
    R = cfg.row_capacity
    every = max(1, cfg.updates // points)
    packer = Packer(open_split(data_dir, cfg.source, "val"), "original", R, cfg.eval_buffer)
    rows = [packer.next_rows(cfg.eval_rows)[0] for _ in range(min(cfg.eval_batches, CURVE_BATCHES))]
    tb = load_token_bytes(Layout(data_dir, cfg.source).tokenizer)

    def probe(fwd, step):
        if step % every and step != cfg.updates:
            return None
        nats = nbytes = 0.0
        with torch.no_grad():
            for toks in rows:
                n, b, _ = score_fixed_shape(fwd, toks[:, :-1], toks[:, 1:].astype(np.int64), tb, [0, R - 1], device,
                                            autocast, cfg.eval_rows)
                nats, nbytes = nats + float(n.sum()), nbytes + float(b.sum())
        return nats / (math.log(2) * nbytes)

    return probe


def _train(cfg, out, resume, stop_after, log, curve_points=0, allow_code_change=False, collect_garbage=False):
    """One process's run: check, resume or start, the updates, then (rank 0) the official score."""
    t_start = time.time()
    cfg = world_config(cfg)
    done = finished_run(out, cfg) if resume else None
    if done is not None:
        if int(os.environ.get("RANK", 0)) == 0:
            log(f"{cfg.name}: already finished ({out / 'summary.json'}); nothing to do")
        return done
    device, rank, world = start_process(cfg)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = cfg.data_dir or str(default_data_dir())
    ident = check_data(cfg, data_dir)
    seed_host_rngs(cfg.seed)
    path, payload, allowed = resume_point(out, cfg, ident, resume, allow_code_change, log)
    if rank == 0:
        log(f"{cfg.name}: {compact_config(cfg)}")
    packer = Packer(training_stream(cfg, data_dir), cfg.loader, cfg.row_capacity, cfg.buffer, seed=cfg.random_span_seed)
    loader = MicrobatchLoader(packer, cfg.micro_rows, rank=rank, world=world, device=device, prefetch=cfg.prefetch)
    tr = Trainer(cfg, device, world)
    progress = Progress(allowed_code_changes=allowed)
    if payload is not None:
        progress = restore_run(payload, tr, loader, rank, allowed)
        if rank == 0:
            log(f"resumed from {path} at update {progress.step}")
    log_path = out / "train_log.jsonl"
    if rank == 0:  # keep the log lines up to the resumed update: an interrupted run may have logged past it
        trim_log(log_path, progress.step)
    probe = curve_probe(cfg, data_dir, device, tr.autocast, curve_points) if rank == 0 and curve_points else None
    end = cfg.updates if stop_after is None else min(cfg.updates, stop_after)
    # a caller that froze its own objects (gc.freeze: tests/conftest.py freezes the imported session) keeps them
    # frozen: this run then neither freezes nor unfreezes, since gc.unfreeze would release the caller's too
    freeze = not caller_froze_objects()
    save = lambda: checkpoint(out, cfg, ident, tr, loader, progress, rank, world, t_start)  # noqa: E731
    try:
        run_updates(cfg, tr, loader, progress, end, log_path, probe, device, rank, world, save, collect_garbage, freeze)
        loader.close()
    finally:  # a run that raised too (a library caller may go on to the next)
        if freeze:
            gc.unfreeze()  # a library caller keeps collecting what this run left
    if progress.step < cfg.updates:
        return None
    if progress.train_loss is None:  # resumed at the final checkpoint of a run killed while scoring
        kept = [json.loads(ln) for ln in kept_log_lines(log_path, progress.step)]
        progress.train_loss = kept[-1]["loss"] if kept and kept[-1]["step"] == progress.step else None
    result = official_summary(cfg, out, tr, progress, device, world, ident, data_dir, t_start) if rank == 0 else None
    if world > 1:
        end_process(tr)
    return result


def start_process(cfg):
    """(device, rank, world): the device configured, the process group joined, peak memory reset."""
    device = devices.resolve_device(cfg.device, "config key 'device'")
    if ":" in device and int(os.environ.get("WORLD_SIZE", 1)) > 1:  # refused before NCCL starts on that one GPU
        raise DataError(f"config key 'device': {device!r} under torchrun would put all {os.environ['WORLD_SIZE']} "
                        f"ranks on one GPU; use device=cuda (rank r takes cuda:LOCAL_RANK) or CUDA_VISIBLE_DEVICES")
    devices.configure(device)  # before dist_setup: NCCL's first allocation must see configure's settings
    rank, world, local_rank = dist_setup()
    if device == "cuda":
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    reset_peak_memory(device)
    if cfg.accum % world:
        raise DataError(f"accum={cfg.accum} must be a multiple of the world size {world}")
    return device, rank, world


def check_data(cfg, data_dir) -> dict:
    """The prepared corpus matches the config and its token files are whole; its identity."""
    lay = Layout(data_dir, cfg.source)
    if lay.prepared()["vocab_size"] != cfg.vocab:
        raise DataError(f"config vocab {cfg.vocab} != prepared tokenizer vocab {lay.prepared()['vocab_size']}")
    check_token_files(data_dir, cfg.source, lay.shard_names("train") + lay.shard_names("val"))
    return data_identity(lay)


def resume_point(out, cfg, ident, resume, allow_code_change, log):
    """(path, payload, allowed code changes) of the checkpoint to resume from, checked against the
    config, corpus and code before anything is built from it; (None, None, []) for a fresh start."""
    if not resume:
        return None, None, []
    path, payload = newest_good_checkpoint(out, log=log)
    if payload is None:
        # a folder an earlier start left without a checkpoint (a run stopped early): said, not silent
        if int(os.environ.get("RANK", 0)) == 0 and any(not p.name.startswith(".") for p in Path(out).iterdir()):
            log(f"resume: {out} holds no usable checkpoint; starting at update 0")
        return None, None, []
    return path, payload, check_resumable(path, payload, cfg, ident, allow_code_change, log)


def checkpoint(out, cfg, ident, tr, loader, progress, rank, world, t_start):
    """Every rank's loader position gathered; rank 0 writes the checkpoint."""
    states = [loader.state_dict()]
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, states[0])
        states = gathered
    if rank == 0:
        save_run(out, cfg, ident, tr, states, progress, t_start)


_caller_froze = False  # kept once true (caller_froze_objects)


def caller_froze_objects():
    """Whether this process froze objects of its own (gc.freeze) before the run. Asked until the answer is yes, then
    kept: gc.get_freeze_count() walks every frozen object (0.1 s over the 1.4 M a test process freezes, at each run),
    and a process that froze its objects keeps them frozen. One that unfreezes them later costs its later runs only
    their own freeze (slower collections), never a release of its objects."""
    global _caller_froze
    _caller_froze = _caller_froze or gc.get_freeze_count() > 0
    return _caller_froze


def run_updates(cfg, tr, loader, progress, end, log_path, probe, device, rank, world, save, collect_garbage=False,
                freeze=True):
    """The training loop: one update at a time to `end`, timed, logged, checkpointed. freeze: what exists after
    the first update is frozen (gc.freeze), collected first if collect_garbage."""
    fpt = tr.model.flops_per_token()
    bar = tqdm(total=cfg.updates, initial=progress.step, desc=cfg.name, unit="upd", disable=rank != 0)
    done_here = 0
    try:  # closed on a Ctrl-C too, so main's line about it stands below the bar
        while progress.step < end:
            t0 = time.time()
            # the update ends with its record's copy to the host, which waits for every kernel it queued
            progress.train_loss, lr_mult = tr.update(loader, progress.step, cfg.updates)
            dt = time.time() - t0
            done_here += 1
            if done_here == 1 and freeze:  # as the baseline: what the first update built is never scanned again
                if collect_garbage:  # a library caller may skip it: a full collection of a large heap (0.3-0.7 s
                    gc.collect()  # with the audit's libraries loaded) can take longer than a short run
                gc.freeze()
            count_time(progress.clock, dt, tr.last_wait, timed=done_here > WARMUP_UPDATES)
            progress.step += 1
            checks = tr.last_checks_by_rank  # every rank's fingerprints came with the loss: no collective here
            tps = cfg.targets_per_update / dt
            post = {"loss": f"{progress.train_loss:.4f}", "tok/s": f"{tps:,.0f}"}
            if peak_flops(device):
                post["mfu"] = f"{100 * fpt * tps / (peak_flops(device) * world):.1f}%"
            bar.set_postfix(post)
            bar.update(1)
            if rank == 0:
                # after dt: the probe is not training time
                val_bpb = probe(tr.eval_fwd, progress.step) if probe else None
                log_update(log_path, cfg, progress, lr_mult, dt, checks, val_bpb)
            if (cfg.checkpoint_every and progress.step % cfg.checkpoint_every == 0) or progress.step == cfg.updates:
                save()
    finally:
        bar.close()


def count_time(clock, dt, loader_wait, timed):
    clock["update_seconds"] += dt
    clock["loader_wait_seconds"] += loader_wait
    if timed:
        clock["timed_seconds"] += dt
        clock["timed_updates"] += 1


def log_update(log_path, cfg, progress, lr_mult, dt, checks, val_bpb):
    """One train_log.jsonl line, with the microbatches in global order (rank r ran the j-th of each
    group of world): which rows trained when."""
    world = len(checks)
    order = [(r, checks[r][j]) for j in range(len(checks[0])) for r in range(world)]
    rec = {"step": progress.step, "loss": progress.train_loss, "lr_mult": lr_mult,
           "targets": progress.step * cfg.targets_per_update, "seconds": dt,
           "micro": [c for _, c in order], "micro_rank": [r for r, _ in order]}
    if val_bpb is not None:
        rec["val_bpb"] = val_bpb
    with open(log_path, "a") as f:
        f.write(json.dumps(rec, allow_nan=False) + "\n")


def official_summary(cfg, out, tr, progress, device, world, ident, data_dir, t_start) -> dict:
    """The official score of the final model, its row statistics, and summary.json."""
    lay = Layout(data_dir, cfg.source)
    tb = load_token_bytes(lay.tokenizer)
    val = open_split(data_dir, cfg.source, "val")
    t_eval = time.time()
    stats = row_statistics(tr.eval_fwd, val, tb, cfg.eval_batches, cfg.eval_rows, cfg.row_capacity, device, tr.autocast,
                           cfg.eval_buffer)
    sc = scores(stats)
    ckpt = out / f"ckpt_{cfg.updates:06d}.pt"
    write_stats(out / "official_rows.parquet", stats, {"checkpoint_sha256": sha256_file(ckpt)})
    clock, tokens_per_update = progress.clock, cfg.targets_per_update
    timed_tps = clock["timed_updates"] * tokens_per_update / clock["timed_seconds"] if clock["timed_seconds"] else None
    result = {"name": cfg.name, "loader": cfg.loader, "seed": cfg.seed, "updates": cfg.updates,
              "targets": cfg.updates * tokens_per_update, "final_train_loss": finite_or_none(progress.train_loss),
              "official": {**sc, "eval_targets": cfg.eval_batches * cfg.eval_rows * cfg.context,
                           "fingerprint": stats["fingerprint"], "seconds": time.time() - t_eval},
              "training_seconds": clock["timed_seconds"], "timed_updates": clock["timed_updates"],
              "untimed_warmup_updates": WARMUP_UPDATES, "all_update_seconds": clock["update_seconds"],
              "tokens_per_second": timed_tps,
              "loader_wait_share": (clock["loader_wait_seconds"] / clock["update_seconds"]
                                    if clock["update_seconds"] else None),
              "total_seconds": clock["earlier_process_seconds"] + time.time() - t_start,
              "peak_memory_mib": peak_memory_mib(device), "parameters": sum(p.numel() for p in tr.model.parameters()),
              "flops_per_token": tr.model.flops_per_token(), "world_size": world, "device": device,
              "context": cfg.context, "config": cfg.to_dict(), "config_sha256": config_sha256(cfg.to_dict()),
              "data": ident, "allowed_code_changes": progress.allowed_code_changes}
    atomic_write_json(out / "summary.json", result)
    return result


def end_process(tr):
    """DDP's reducer holds the process group: let go of it while every rank is alive, so the group
    ends in step on all ranks. Held past destroy_process_group, the group ended with this
    function's locals, after the peer might have exited, and a Gloo rank hung there under load."""
    tr.ddp = tr.fwd = None
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    try:  # `kill -USR1 PID` prints where a run is (a stuck DDP rank: training/launch.py), to the process's own stderr
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    except (AttributeError, ValueError, OSError):  # no SIGUSR1 (Windows), or no stderr file to write to
        pass
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_arguments(build_parser(), argv)
    if missing_config(a):
        print(missing_config(a), file=sys.stderr)
        return 2
    cfg = None
    try:
        cfg = resolve_config(a.config, a.overrides)
        if a.dry_run:
            dry_run(cfg)
            return 0
        if not a.config and int(os.environ.get("RANK", 0)) == 0:
            print(defaults_line(cfg, a.overrides))
        out = a.out or f"runs/{cfg.name}"
        if a.resume and not Path(out).is_dir():  # a mistyped --out would start a fresh run in a new folder
            what = "is not a folder" if Path(out).exists() else "does not exist"
            raise DataError(f"--resume: {out} {what}, so there is no run to continue; check --out, or leave out "
                            "--resume to start a run there")
        res = train(cfg, out, resume=a.resume, curve_points=CURVE_POINTS, overwrite=a.overwrite,
                    allow_code_change=a.allow_code_change, collect_garbage=True)
    except (DataError, TrainingDiverged) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e, a.out)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: checkpoints are written atomically, so the newest one is whole
        print(interrupted_line(argv, a.out or (cfg and f"runs/{cfg.name}")), file=sys.stderr)
        return 130
    if res:
        print(result_line(res))
    return 0


def defaults_line(cfg: TrainConfig, overrides) -> str:
    """A run without --config is built from TrainConfig's defaults, the paper's model unless the pairs change it:
    named before it starts, since on a CPU the paper's model trains for hours."""
    n = model_config(cfg).parameter_counts()[0]
    paper = " (the paper's model)" if model_config(cfg) == model_config(TrainConfig()) else ""
    return (f"no --config: TrainConfig's defaults with {len(overrides)} key=value pair(s): depth {cfg.depth}, "
            f"width {cfg.width}, {n:,} parameters{paper}, {cfg.updates:,} updates of "
            f"{cfg.targets_per_update:,} targets, device={cfg.device}")


def interrupted_line(argv, out) -> str:
    """What a Ctrl-C leaves: the newest checkpoint in out, and the command that continues from it."""
    if not out:
        return "interrupted: stopped before the run started; nothing written"
    ckpts = sorted(Path(out).glob("ckpt_*.pt"))
    kept = (f"{out} keeps its log and checkpoints up to {ckpts[-1].name}" if ckpts else
            f"{out} holds no checkpoint yet (checkpoint_every), a resume starts again at update 0")
    again = [x for x in argv if x != "--overwrite"] + ([] if "--resume" in argv else ["--resume"])
    return f"interrupted: training stopped; {kept}; continue with: python train.py {shlex.join(again)}"


def parse_arguments(ap, argv):
    """key=value overrides may stand anywhere among the options (before or after --out)."""
    return ap.parse_intermixed_args(argv)


def result_line(res) -> str:
    o = res["official"]
    return (f"{res['name']}: official BPB {o['bpb']:.6f}  CE {o['ce']:.6f}  perplexity {o['perplexity']:.4f}  "
            f"timed {res['training_seconds']:.1f}s  total {res['total_seconds']:.1f}s  peak {res['peak_memory_mib']:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
