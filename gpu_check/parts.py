"""The parts of the GPU check (gpu_check/__main__.py). Each takes the shared context and
returns rows {"check", "value", "criterion", "pass"}; pass None means reported, not judged.

The training, scoring and resume parts run the real train.py (`train.train`) and the real
official score (`eval.official`) on the offline corpus, so what they prove is what a paper
run does on that device.
"""
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch._dynamo.utils import counters
from torch.nn.attention.flex_attention import flex_attention

from corpus.atomic import atomic_write_json
from corpus.layout import Layout
from corpus.tokenizer import load_token_bytes
from eval.official import evaluate_checkpoint, score_fixed_shape, scores
from eval.rescore import recorded_rows, reproduction_problem
from loaders.packers import Packer
from loaders.stream import open_split
from records.training import FinishedRun
from shardqueue.engine.runner import Runner
from shardqueue.world.domains import measure
from shardqueue.world.corpus_view import World
from train import WARMUP_UPDATES, train
from training.checkpoint import load_checkpoint
from training.device import autocast
from training.launch import run_group
from training.mfu import device_name, peak_flops
from training.model import AttentionBackend, window_mask
from training.trainer import bf16_enabled, build_model, compile_enabled

CUDA_LOSS_TOL = 0.01  # nats per update, resumed vs uninterrupted on CUDA (kernels are not bitwise deterministic)
DDP_LOSS_TOL = 2e-3  # per update over updates 1-3, 2 ranks vs one process: what tests/test_ddp.py measured on CPU


def row(check, value, criterion="reported", ok=None):
    return {"check": check, "value": value, "criterion": criterion, "pass": ok}


def cuda(device):
    return torch.device(device).type == "cuda"


def rel_err(a, ref):
    return ((a.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


# ---- attention kernels -------------------------------------------------------------
def attention(ctx):
    """Flex and SDPA-with-mask in bf16 against float64, forward and backward."""
    device, shapes = ctx["device"], ctx["attention_shapes"]
    B, H, T, D, w = shapes["batch"], shapes["heads"], shapes["T"], shapes["head_dim"], shapes["window"]
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v, gout = (torch.randn(B, H, T, D, generator=g).to(device) for _ in range(4))

    def run(fn, dtype, grad=True):
        xs = [t.to(dtype).requires_grad_(grad) for t in (q, k, v)]
        out = fn(*xs)
        if not grad:
            return out.detach(), None
        out.backward(gout.to(dtype))
        return out.detach(), [x.grad for x in xs]

    def reference(q_, k_, v_):
        s = (q_ @ k_.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~window_mask(T, w, q_.device), float("-inf"))
        return torch.softmax(s, -1) @ v_

    ref_out, ref_grads = run(reference, torch.float64)
    dense, flex = AttentionBackend(use_flex=False), AttentionBackend(use_flex=True)
    if cuda(device):
        compiled = torch.compile(flex_attention, dynamic=False)
        mask = flex.mask("flex", T, w, torch.device(device))
        flex_fn = lambda a, b, c: compiled(a, b, c, block_mask=mask)  # noqa: E731 - as the compiled model runs it
    else:
        flex_fn = lambda a, b, c: flex(a, b, c, w)  # noqa: E731
    rows = []
    s_out, s_grads = run(lambda a, b, c: dense(a, b, c, w), torch.bfloat16)
    f_out, f_grads = run(flex_fn, torch.bfloat16, grad=cuda(device))  # torch 2.13: no flex backward on CPU
    e_s, e_f = rel_err(s_out, ref_out), rel_err(f_out, ref_out)
    tol = max(2 * e_s, 1e-2)  # bf16 keeps ~3 significant digits: flex passes when as close to float64 as SDPA
    rows.append(row("attention forward, flex vs float64 (rel. Frobenius)", e_f,
                    f"<= {tol:.2e} (2 x SDPA's {e_s:.2e}, at least 1e-2)", e_f <= tol))
    rows.append(row("attention forward, flex vs SDPA-with-mask (max abs)",
                    (f_out.float() - s_out.float()).abs().max().item()))
    for name, sg, fg, rg in zip("qkv", s_grads, f_grads or [None] * 3, ref_grads):
        e_s = rel_err(sg, rg)
        tol = max(2 * e_s, 1e-2)
        if fg is None:
            rows.append(row(f"attention backward d{name}, SDPA-with-mask vs float64", e_s,
                            "<= 1e-2 (flex backward: not in torch on CPU)", e_s <= 1e-2))
        else:
            e_f = rel_err(fg, rg)
            rows.append(row(f"attention backward d{name}, flex vs float64", e_f,
                            f"<= {tol:.2e} (2 x SDPA's {e_s:.2e}, at least 1e-2)", e_f <= tol))
    return rows


# ---- the real train.py -------------------------------------------------------------
def log_losses(run_dir, after=0):
    """Losses of train_log.jsonl's updates after `after`, in order."""
    lines = [json.loads(ln) for ln in (Path(run_dir) / "train_log.jsonl").read_text().splitlines() if ln.strip()]
    return [d["loss"] for d in lines if d["step"] > after]


def dynamo_counts():
    return (counters["frames"]["ok"], counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()))


def attention_dtypes(cfg, device):
    """(q, k, v) dtypes at every attention call of one eager forward, under train.py's autocast policy."""
    m = build_model(cfg, device, seed=0)
    seen = m.attend.record = []
    x = torch.randint(0, cfg.vocab, (1, cfg.context), device=device)
    with torch.no_grad(), autocast(device, bf16_enabled(cfg, device)):
        m(x)
    return seen, torch.bfloat16 if bf16_enabled(cfg, device) else torch.float32


def train_run(ctx):
    """updates of the configured model through train.py, compiled as train.py compiles on the device."""
    cfg, device, out = ctx["cfg"], ctx["device"], ctx["out"] / "run"
    shutil.rmtree(out, ignore_errors=True)
    frames0, graphs0, breaks0 = dynamo_counts()
    res = train(cfg, out, log=ctx["log"], collect_garbage=True)  # as train.py's command line
    frames, graphs, breaks = (a - b for a, b in zip(dynamo_counts(), (frames0, graphs0, breaks0)))
    ctx["run"] = out
    ctx["summary"] = res
    losses = log_losses(out)
    tps, peak = res["tokens_per_second"], peak_flops(device)
    seen, want = attention_dtypes(cfg, device)
    compiled = compile_enabled(cfg, device)
    return [
        row("device", device_name(device)),
        row(f"tokens/s (updates {WARMUP_UPDATES + 1}-{cfg.updates}, compile {'on' if compiled else 'off'})", tps),
        row("MFU (dense bf16 peak of the device)", res["flops_per_token"] * tps / peak if peak and tps else None,
            f"peak {peak / 1e12:.0f} TFLOP/s" if peak else "no peak known for this device"),
        row("peak memory MiB (" + ("GPU allocated" if cuda(device) else "CPU resident") + ")", res["peak_memory_mib"]),
        row("loader wait share of update time", res["loader_wait_share"]),
        row(f"loss falls (mean of updates 1-3 vs {cfg.updates - 2}-{cfg.updates})",
            float(np.mean(losses[:3]) - np.mean(losses[-3:])), "> 0", bool(np.mean(losses[-3:]) < np.mean(losses[:3]))),
        row("compiled graph breaks", breaks if compiled else None, "== 0" if compiled else "compile off",
            breaks == 0 if compiled else None),
        row("compiled graphs (train and eval modes: 2)", graphs if compiled else None),
        row("dynamo frame compilations (first + recompiles)", frames if compiled else None),
        row(f"attention dtypes, {len(seen)} calls (q, k, v)", ", ".join(sorted({str(d) for t in seen for d in t})),
            f"all {want}, one call per layer", len(seen) == cfg.depth and all(d == want for t in seen for d in t)),
    ]


# ---- scoring -------------------------------------------------------------------------
def scoring(ctx):
    """The official score of train.py's final checkpoint, scored afresh and judged as the protocol's
    re-scoring gate judges (eval/rescore.py: per-row nats, bytes and counts, the stream's fingerprint
    and the summary's score, all bit for bit), and one window-style batch (position bins, padded
    targets) through eval's scoring against sums done in numpy."""
    cfg, device, run = ctx["cfg"], ctx["device"], ctx["run"]
    ckpt = run / f"ckpt_{cfg.updates:06d}.pt"
    stats, _ = evaluate_checkpoint(ckpt, ctx["data_dir"], device)
    problem = reproduction_problem(run, FinishedRun.read(run / "summary.json"), ckpt, stats)
    own = recorded_rows(run / "official_rows.parquet")
    same_shape = own["nats"].shape == stats["nats"].shape
    rows = [row("official BPB of the final checkpoint (eval.official)", scores(stats)["bpb"]),
            row("official rows: eval.official vs train.py's own, as the re-scoring gate judges",
                problem or "bitwise equal", "per-row nats, bytes, counts, stream and score bitwise equal",
                problem is None),
            row("official rows: max abs nats difference of one row",
                float(np.abs(stats["nats"] - own["nats"]).max()) if same_shape else None),
            row("official BPB: eval.official vs train.py's own score (abs)",
                abs(scores(stats)["bpb"] - ctx["summary"]["official"]["bpb"]))]
    T, n = cfg.context, cfg.eval_rows
    tb = load_token_bytes(Layout(ctx["data_dir"], cfg.source).tokenizer)
    toks, _ = Packer(open_split(ctx["data_dir"], cfg.source, "val"), "original", T + 1, cfg.eval_buffer).next_rows(n)
    x, y = toks[:, :-1].astype(np.int64), toks[:, 1:].astype(np.int64)
    y[-1, T // 2:] = -1  # padded targets, as the last window batch has
    edges = [0, T // 8, T // 4, T // 2, T]
    model = build_model(cfg, device)
    model.load_state_dict(load_checkpoint(ckpt)["model"])
    nats, nbytes, count = score_fixed_shape(model, x, y, tb, edges, device, bf16_enabled(cfg, device), n)
    b = np.where(y >= 0, tb[np.maximum(y, 0)], 0)
    want_bytes = np.stack([b[:, lo:hi].sum(1) for lo, hi in zip(edges[:-1], edges[1:])], 1)
    want_count = np.stack([(b[:, lo:hi] > 0).sum(1) for lo, hi in zip(edges[:-1], edges[1:])], 1)
    ok = bool((nbytes == want_bytes).all() and (count == want_count).all())
    rows.append(row(f"window batch ({n} rows, {len(edges) - 1} bins): bytes and counts per bin", int(nbytes.sum()),
                    "== numpy's sums", ok))
    w_bpb = float(nats.sum() / (math.log(2) * nbytes.sum()))
    rows.append(row("window batch BPB", w_bpb, "finite, > 0", bool(np.isfinite(nats).all() and w_bpb > 0)))
    return rows


# ---- resume --------------------------------------------------------------------------
def resume(ctx):
    """train.py --resume from the run's checkpoint at resume_at, in a fresh folder and process
    state; the updates after it against the uninterrupted run."""
    cfg, device, a, at = ctx["cfg"], ctx["device"], ctx["run"], ctx["resume_at"]
    b = ctx["out"] / "resumed"
    shutil.rmtree(b, ignore_errors=True)
    b.mkdir(parents=True)
    for suffix in (".pt", ".json"):
        shutil.copy(a / f"ckpt_{at:06d}{suffix}", b / f"ckpt_{at:06d}{suffix}")
    res = train(cfg, b, resume=True, log=ctx["log"], collect_garbage=True)
    la, lb = log_losses(a, at), log_losses(b, at)
    dloss = max(abs(x - y) for x, y in zip(la, lb)) if len(la) == len(lb) == cfg.updates - at else float("inf")
    pa = load_checkpoint(a / f"ckpt_{cfg.updates:06d}.pt")["model"]
    pb = load_checkpoint(b / f"ckpt_{cfg.updates:06d}.pt")["model"]
    dparam = max(((pb[k].float() - pa[k].float()).norm() / pa[k].float().norm().clamp_min(1e-30)).item() for k in pa)
    tol = CUDA_LOSS_TOL if cuda(device) else 0.0
    return [
        row(f"resume at {at}: max abs loss difference, updates {at + 1}-{cfg.updates}", dloss,
            f"<= {tol:g}" + (" (CUDA kernels are not bitwise deterministic)" if cuda(device) else " (CPU: bitwise)"),
            dloss <= tol),
        row(f"resume at {at}: parameters after {cfg.updates} (max rel. Frobenius)", dparam,
            "reported" if cuda(device) else "== 0 (CPU: bitwise)", None if cuda(device) else dparam == 0.0),
        row(f"resume at {at}: official BPB difference", abs(res["official"]["bpb"] - ctx["summary"]["official"]["bpb"]),
            "reported" if cuda(device) else "== 0 (CPU: bitwise)",
            None if cuda(device) else res["official"]["bpb"] == ctx["summary"]["official"]["bpb"]),
    ]


# ---- the shard queue -----------------------------------------------------------------
def queue_shards(world, cfg):
    """Two pool shards of the offline corpus, of just over an update and over half an update, whose
    last microbatches are short (padded) by different numbers of rows, where microbatches allow it."""
    ends = np.concatenate([[0], np.cumsum(world.stream.lengths)])  # tokens before document i
    m, n = cfg.micro_rows, len(ends) - 1

    def tail(a, b):  # rows of the last microbatch of documents a..b-1
        return -(-int(ends[b] - ends[a]) // cfg.context) % m

    def extend(a, b, other):  # the first end from b on whose last microbatch is short, unlike `other`
        while b < n and m > 1 and (tail(a, b) == 0 or (m > 2 and tail(a, b) == other)):
            b += 1
        return b

    per_update = m * cfg.accum * cfg.context
    a = extend(0, min(n, int(np.searchsorted(ends, per_update, side="right"))), None)
    b = extend(a, min(n, int(np.searchsorted(ends, ends[a] + per_update // 2, side="right"))), tail(0, a))
    return [{"id": "s0", "docs": [[0, a]], "sources": {}}, {"id": "s1", "docs": [[a, b]], "sources": {}}]


def queue(ctx):
    """Two shards of the offline corpus through the queue runner's own screen, train and measure
    steps on the device (shardqueue/engine/runner.py), under train.py's autocast policy: compiled where
    training is, the second shard (another last-update size) compiles nothing new."""
    cfg, device = ctx["cfg"], ctx["device"]
    world = World(cfg, device, per_domain=2)
    shards = queue_shards(world, cfg)
    pool = {"shards": shards, "order": [s["id"] for s in shards], "harmful": {"label": "harmful"}, "seed": 0}
    r = Runner(cfg, world, pool, {}, ctx["out"] / "queue", log=ctx["log"])
    before = r.measure_fn(r.trainer.model)
    graphs, recs, screened = [], [], []
    for sh in shards:
        screened.append(r.screen(sh["id"])["score"])
        recs.append(r.train_shard(sh["id"]))
        after = r.measure_fn(r.trainer.model)
        graphs.append(dynamo_counts()[1])
    seen = r.trainer.model.attend.record = []  # an eager measurement: every attention call is seen
    measure(r.trainer.model, world.sets["control"], world.token_bytes, device, r.trainer.autocast)
    r.trainer.model.attend.record = None
    want = torch.bfloat16 if bf16_enabled(cfg, device) else torch.float32
    finite = all(math.isfinite(v) for v in (*before.values(), *after.values(), *screened,
                                            *(x["train_loss"] for x in recs)))
    compiled = r.trainer.fixed_rows is not None
    tails = [len(r.rows(sh["id"])[0]) % cfg.micro_rows or cfg.micro_rows for sh in shards]  # rows, not padding
    return [
        row(f"queue: two shards trained ({', '.join(str(x['updates']) for x in recs)} updates, last microbatches "
            f"of {' and '.join(map(str, tails))} rows), loss of the last", recs[-1]["train_loss"],
            "finite, >= 1 update each", all(x["updates"] >= 1 for x in recs) and finite),
        row("queue: control-domain BPB, mean before -> after", f"{np.mean(list(before.values())):.4f} -> "
            f"{np.mean(list(after.values())):.4f}", "all finite", finite),
        row("queue: screen scores (shard BPB - pool-sample BPB)", ", ".join(f"{v:.4f}" for v in screened)),
        row("queue: graphs compiled by the second shard (another last-update size)",
            graphs[1] - graphs[0] if compiled else None, "== 0" if compiled else "compile off",
            graphs[1] == graphs[0] if compiled else None),
        row(f"queue: attention dtypes while measuring, {len(seen)} calls", ", ".join(sorted({str(d) for t in seen
                                                                                              for d in t})),
            f"all {want}", bool(seen) and all(d == want for t in seen for d in t)),
    ]


# ---- DDP -----------------------------------------------------------------------------
def ddp(ctx):
    """torchrun with 2 ranks (NCCL, compiled as train.py compiles) against the one-process run."""
    cfg, device = ctx["cfg"], ctx["device"]
    if not cuda(device) or torch.cuda.device_count() < 2:
        return [row("DDP, 2 ranks", "not run: fewer than 2 GPUs visible (CPU DDP: tests/test_ddp.py)", "not judged")]
    out = ctx["out"] / "ddp"
    shutil.rmtree(out, ignore_errors=True)
    atomic_write_json(ctx["out"] / "ddp_config.json", {**cfg.to_dict(), "device": "cuda"})  # the one-process config
    root = Path(__file__).resolve().parents[1]
    r = run_group([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   str(root / "train.py"), "--config", str(ctx["out"] / "ddp_config.json"), "--out", str(out)],
                  cwd=root, timeout=600)
    if r.returncode:
        raise RuntimeError(f"torchrun exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    one, two = log_losses(ctx["run"]), log_losses(out)
    first = max(abs(x - y) for x, y in zip(one[:3], two[:3]))
    return [row("DDP, 2 ranks: max abs loss difference, updates 1-3", first, f"<= {DDP_LOSS_TOL:g}",
                first <= DDP_LOSS_TOL),
            row(f"DDP, 2 ranks: max abs loss difference, updates 1-{cfg.updates}",
                max(abs(x - y) for x, y in zip(one, two)))]


PARTS = {"attention": attention, "train": train_run, "scoring": scoring, "resume": resume, "queue": queue, "ddp": ddp}
