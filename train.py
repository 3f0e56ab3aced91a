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
the official score (eval/official.py) and row-level sufficient statistics.

--resume continues from the newest checkpoint that verifies and gives bitwise the
parameters of an uninterrupted run on CPU. It refuses a checkpoint written under another
config (naming the keys; only run-time keys such as device, eval_batches may differ), on
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
import signal
import sys
import time
from pathlib import Path


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="JSON config (keys: see training/config.py TrainConfig); required to train")
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
import torch.distributed as dist

from corpus.errors import DataError
from training.config import TrainConfig, resolve_config
from training.trainer import Trainer, TrainingDiverged, build_model

from training.mfu import peak_flops


def resolve_device(cfg):
    from training.device import resolve_device as resolve

    return resolve(cfg.device, "config key 'device'")


def configure_device(device):
    from training.device import configure

    configure(device)


def dry_run(cfg: TrainConfig):
    m = build_model(cfg, "meta", meta=True)
    n = sum(p.numel() for p in m.parameters())
    fpt = m.flops_per_token()
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
    from corpus.layout import Layout
    from corpus.tokenizer import bos_id, load_encoding
    from loaders.stream import DocumentStream, open_split

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
    from training.config import for_world_size

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


WARMUP_UPDATES = 11  # as the baseline's training time (`step > 10`): updates 1-11 (compile, warm-up) are not timed


def check_token_files(data_dir, source, names):
    """A .tokens.bin shorter or longer than its offsets say is named in one line before any use."""
    from corpus.layout import Layout
    from corpus.pretokenize import shard_paths

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
    from training.config import config_sha256

    d = cfg.to_dict()
    return f"config {config_sha256(d)[:12]}: " + " ".join(f"{k}={d[k]}" for k in sorted(d))


def finite_or_none(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


RUN_FILES = ("train_log.jsonl", "summary.json", "official_rows.parquet")


def holds_a_run(out: Path) -> bool:
    return any((out / n).exists() for n in RUN_FILES) or any(out.glob("ckpt_*.pt"))


def start_guard(out: Path, resume, overwrite, log):
    """Never mix two runs in one folder: without --resume a folder holding a run is refused,
    or with --overwrite moved aside whole (to OUT.replaced-N) first. Temporary files of a
    killed write are removed (the folder lock is held, so no writer owns them)."""
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
    for p in sorted(out.glob(".*.tmp")):
        p.unlink()
        log(f"removed {p.name}, left by an interrupted write")


def code_changes(payload) -> list:
    from training.checkpoint import code_sha256

    saved, now = payload.get("code_sha256") or {}, code_sha256()
    return sorted(f for f in set(saved) | set(now) if saved.get(f) != now.get(f))


def check_resumable(path, payload, cfg, ident, allow_code_change, log) -> list:
    """Refuse a checkpoint of another config, corpus or (unless allowed) code; returns the
    list of allowed code changes so far (recorded in later checkpoints and the summary)."""
    from training.checkpoint import data_mismatch
    from training.config import resume_differences

    diff = resume_differences(payload.get("config", {}), cfg)
    if diff:
        raise DataError(f"{path}: written under another config; refusing to resume (differs in {', '.join(diff)})")
    why = data_mismatch(payload.get("data"), ident)
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
    """Log lines up to the resumed update: an interrupted run may have logged past it, and a
    kill mid-write leaves a torn last line, which is dropped."""
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


def train(cfg: TrainConfig, out_dir, resume=False, stop_after=None, log=print, curve_points=0, overwrite=False,
          allow_code_change=False):
    """Train cfg.updates updates (or stop_after of them, to simulate an interruption); curve_points > 0
    logs that many validation BPB points for the learning curves (the command line and run_six do)."""
    from corpus.runlock import FolderLocked, folder_lock

    rank = int(os.environ.get("RANK", 0))
    out = Path(out_dir)
    if rank != 0:
        return _train(cfg, out, resume, stop_after, log, curve_points, allow_code_change)
    try:
        with folder_lock(out, "a training run"):
            start_guard(out, resume, overwrite, log)
            return _train(cfg, out, resume, stop_after, log, curve_points, allow_code_change)
    except FolderLocked as e:
        raise DataError(str(e)) from None


CURVE_POINTS = 10  # validation points per run for the learning curves (command line and run_six)
CURVE_BATCHES = 2  # official-stream batches per point: the same fixed rows every time


def curve_probe(cfg, data_dir, R, device, autocast, points=CURVE_POINTS):
    """probe(fwd, step) -> validation BPB on the official stream's first CURVE_BATCHES batches at
    `points` evenly spaced updates (else None). Training losses sample different rows per
    condition, so only a fixed evaluation set makes the conditions' curves comparable. The rows
    are packed once and scored at every point."""
    import math

    from corpus.layout import Layout
    from corpus.tokenizer import load_token_bytes
    from eval.official import score_fixed_shape
    from loaders.packers import Packer
    from loaders.stream import open_split

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


def _train(cfg, out, resume, stop_after, log, curve_points=0, allow_code_change=False):
    from console.progress import bar as tqdm

    from corpus.atomic import atomic_write_json, atomic_write_text, sha256_file
    from corpus.layout import Layout, default_data_dir
    from corpus.tokenizer import load_token_bytes
    from eval.official import row_statistics, scores, write_stats
    from loaders.batches import MicrobatchLoader
    from loaders.packers import Packer
    from loaders.stream import open_split
    from training.checkpoint import (code_sha256, data_identity, newest_good_checkpoint, rng_states,
                                     save_checkpoint, seed_host_rngs, set_rng_states)
    from training.config import config_sha256, resume_differences

    t_start = time.time()
    rank = int(os.environ.get("RANK", 0))
    cfg = world_config(cfg)
    summary_path = out / "summary.json"
    if resume and summary_path.exists():
        # a finished run is reported, never rewritten
        try:
            done = json.loads(summary_path.read_text())
        except (ValueError, UnicodeDecodeError):
            raise DataError(f"{summary_path}: unreadable; move it aside to score the final checkpoint again") from None
        diff = resume_differences(done.get("config", {}), cfg)
        if diff:
            raise DataError(f"{out}: finished under another config (differs in {', '.join(diff)})")
        if rank == 0:
            log(f"{cfg.name}: already finished ({summary_path}); nothing to do")
        return done
    device = resolve_device(cfg)  # before dist_setup: NCCL's first allocation must see configure's settings
    configure_device(device)
    rank, world, local_rank = dist_setup()
    if device == "cuda":
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    reset_peak_memory(device)
    if cfg.accum % world:
        raise DataError(f"accum={cfg.accum} must be a multiple of the world size {world}")
    out.mkdir(parents=True, exist_ok=True)
    data_dir = cfg.data_dir or str(default_data_dir())
    lay = Layout(data_dir, cfg.source)
    if lay.prepared()["vocab_size"] != cfg.vocab:
        raise DataError(f"config vocab {cfg.vocab} != prepared tokenizer vocab {lay.prepared()['vocab_size']}")
    check_token_files(data_dir, cfg.source, lay.shard_names("train") + lay.shard_names("val"))
    ident = data_identity(lay)
    seed_host_rngs(cfg.seed)
    R = cfg.row_capacity
    payload, path = None, None
    allowed_code_changes = []
    if resume:  # config, corpus and code are compared before anything is built from them
        path, payload = newest_good_checkpoint(out, log=log)
        if payload is not None:
            allowed_code_changes = check_resumable(path, payload, cfg, ident, allow_code_change, log)
    if rank == 0:
        log(f"{cfg.name}: {compact_config(cfg)}")
    stream = training_stream(cfg, data_dir)
    loader = MicrobatchLoader(Packer(stream, cfg.loader, R, cfg.buffer, seed=cfg.random_span_seed), cfg.micro_rows,
                              rank=rank, world=world, device=device, prefetch=cfg.prefetch)
    tr = Trainer(cfg, device, world)
    model, fwd, autocast = tr.model, tr.eval_fwd, tr.autocast
    step = 0
    # times carried across resumes: timed (after warm-up), all updates, and wall time of earlier processes
    clock = {"timed_seconds": 0.0, "timed_updates": 0, "update_seconds": 0.0, "loader_wait_seconds": 0.0,
             "earlier_process_seconds": 0.0}
    loss_val = None
    if payload is not None:
        tr.load_state_dict(payload)
        loader.load_state_dict(payload["loader"][rank] if isinstance(payload["loader"], list) else payload["loader"])
        set_rng_states(payload["rng"])
        step = payload["step"]
        clock.update(payload.get("clock", {}))
        loss_val = payload.get("train_loss")
        if rank == 0:
            log(f"resumed from {path} at update {step}")
    log_path = out / "train_log.jsonl"
    if rank == 0:  # keep the log lines up to the resumed update: an interrupted run may have logged past it
        kept = kept_log_lines(log_path, step)
        atomic_write_text(log_path, "".join(ln + "\n" for ln in kept))
    fpt = model.flops_per_token()
    tokens_per_update = cfg.targets_per_update
    end = cfg.updates if stop_after is None else min(cfg.updates, stop_after)
    bar = tqdm(total=cfg.updates, initial=step, desc=cfg.name, unit="upd", disable=rank != 0)
    probe = curve_probe(cfg, data_dir, R, device, autocast, curve_points) if rank == 0 and curve_points else None
    done_here = 0

    def checkpoint(at):
        states = [loader.state_dict()]
        if world > 1:
            gathered = [None] * world
            dist.all_gather_object(gathered, states[0])
            states = gathered
        if rank == 0:
            clk = {**clock, "earlier_process_seconds": clock["earlier_process_seconds"] + time.time() - t_start}
            save_checkpoint(out, at, {**tr.state_dict(), "loader": states if world > 1 else states[0], "rng": rng_states(),
                                      "step": at, "train_loss": loss_val, "config": cfg.to_dict(),
                                      "config_sha256": config_sha256(cfg.to_dict()), "code_sha256": code_sha256(),
                                      "data": ident, "allowed_code_changes": allowed_code_changes},
                            keep=cfg.keep_checkpoints, protect=(cfg.updates,), run_facts={"clock": clk})

    while step < end:
        t0 = time.time()
        loss_val, lr_mult = tr.update(loader, step, cfg.updates)
        if "cuda" in device:
            torch.cuda.synchronize()
        dt = time.time() - t0
        done_here += 1
        if done_here == 1:  # as the baseline: what the first update built is never scanned by the collector again
            gc.collect()
            gc.freeze()
        clock["update_seconds"] += dt
        clock["loader_wait_seconds"] += tr.last_wait
        if done_here > WARMUP_UPDATES:
            clock["timed_seconds"] += dt
            clock["timed_updates"] += 1
        step += 1
        checks = [tr.last_checks]
        if world > 1:
            checks = [None] * world
            dist.all_gather_object(checks, tr.last_checks)
        tps = tokens_per_update / dt
        post = {"loss": f"{loss_val:.4f}", "tok/s": f"{tps:,.0f}"}
        if peak_flops(device):
            post["mfu"] = f"{100 * fpt * tps / (peak_flops(device) * world):.1f}%"
        bar.set_postfix(post)
        bar.update(1)
        if rank == 0:
            # microbatches in global order (rank r ran the j-th of each group of world): which rows trained when
            order = [(r, checks[r][j]) for j in range(len(checks[0])) for r in range(world)]
            rec = {"step": step, "loss": loss_val, "lr_mult": lr_mult, "targets": step * tokens_per_update, "seconds": dt,
                   "micro": [c for _, c in order], "micro_rank": [r for r, _ in order]}
            val_bpb = probe(fwd, step) if probe else None  # after dt: the probe is not training time
            if val_bpb is not None:
                rec["val_bpb"] = val_bpb
            with open(log_path, "a") as f:
                f.write(json.dumps(rec, allow_nan=False) + "\n")
        if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.updates:
            checkpoint(step)
    bar.close()
    loader.close()
    gc.unfreeze()  # a library caller (the queue, tests) keeps collecting what this run left
    if step < cfg.updates:
        return None
    if loss_val is None:  # resumed at the final checkpoint of a run killed while scoring
        kept = [json.loads(ln) for ln in kept_log_lines(log_path, step)]
        loss_val = kept[-1]["loss"] if kept and kept[-1]["step"] == step else None
    # official score at the end of the run
    result = None
    if rank == 0:
        tb = load_token_bytes(lay.tokenizer)
        val = open_split(data_dir, cfg.source, "val")
        t_eval = time.time()
        stats = row_statistics(fwd, val, tb, cfg.eval_batches, cfg.eval_rows, R, device, autocast, cfg.eval_buffer)
        sc = scores(stats)
        ckpt = out / f"ckpt_{cfg.updates:06d}.pt"
        write_stats(out / "official_rows.parquet", stats, {"checkpoint_sha256": sha256_file(ckpt)})
        timed_tps = clock["timed_updates"] * tokens_per_update / clock["timed_seconds"] if clock["timed_seconds"] else None
        result = {"name": cfg.name, "loader": cfg.loader, "seed": cfg.seed, "updates": cfg.updates,
                  "targets": cfg.updates * tokens_per_update, "final_train_loss": finite_or_none(loss_val),
                  "official": {**sc, "eval_targets": cfg.eval_batches * cfg.eval_rows * cfg.context,
                               "fingerprint": stats["fingerprint"], "seconds": time.time() - t_eval},
                  "training_seconds": clock["timed_seconds"], "timed_updates": clock["timed_updates"],
                  "untimed_warmup_updates": WARMUP_UPDATES, "all_update_seconds": clock["update_seconds"],
                  "tokens_per_second": timed_tps,
                  "loader_wait_share": (clock["loader_wait_seconds"] / clock["update_seconds"]
                                        if clock["update_seconds"] else None),
                  "total_seconds": clock["earlier_process_seconds"] + time.time() - t_start,
                  "peak_memory_mib": peak_memory_mib(device), "parameters": sum(p.numel() for p in model.parameters()),
                  "flops_per_token": fpt, "world_size": world, "device": device, "context": cfg.context,
                  "config": cfg.to_dict(), "config_sha256": config_sha256(cfg.to_dict()), "data": ident,
                  "allowed_code_changes": allowed_code_changes}
        atomic_write_json(summary_path, result)
    if world > 1:
        # DDP's reducer holds the process group: let go of it while every rank is alive, so the group
        # ends in step on all ranks. Held past destroy_process_group, the group ended with this
        # function's locals, after the peer might have exited, and a Gloo rank hung there under load.
        tr.ddp = tr.fwd = None
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return result


def main(argv=None):
    try:  # `kill -USR1 PID` prints where a run is (a stuck DDP rank: training/launch.py), to the process's own stderr
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    except (AttributeError, ValueError, OSError):  # no SIGUSR1 (Windows), or no stderr file to write to
        pass
    a = parse_arguments(build_parser(), argv)
    if missing_config(a):
        print(missing_config(a), file=sys.stderr)
        return 2
    try:
        cfg = resolve_config(a.config, a.overrides)
        if a.dry_run:
            dry_run(cfg)
            return 0
        res = train(cfg, a.out or f"runs/{cfg.name}", resume=a.resume, curve_points=CURVE_POINTS, overwrite=a.overwrite,
                    allow_code_change=a.allow_code_change)
    except (DataError, TrainingDiverged) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        from corpus.errors import os_error_line

        print(f"error: {os_error_line(e, a.out)}", file=sys.stderr)
        return 2
    if res:
        print(result_line(res))
    return 0


def parse_arguments(ap, argv):
    """key=value overrides may stand anywhere among the options (before or after --out)."""
    return ap.parse_intermixed_args(argv)


def result_line(res) -> str:
    o = res["official"]
    return (f"{res['name']}: official BPB {o['bpb']:.6f}  CE {o['ce']:.6f}  perplexity {o['perplexity']:.4f}  "
            f"timed {res['training_seconds']:.1f}s  total {res['total_seconds']:.1f}s  peak {res['peak_memory_mib']:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
