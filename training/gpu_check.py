"""One command that checks the GPU path of the training core and measures it.

  python -m training.gpu_check [--out DIR]                 # on a CUDA GPU, the paper's shapes
  python -m training.gpu_check --device cpu --tiny         # every line except the CUDA kernels, in CI

(a) attention: flex attention with the sliding-window block mask against SDPA with the
    dense mask, both against a float64 reference, forward and backward, in bf16 on the
    paper's shapes (heads 4, head dim 128, context 2048, short window 1024). On CPU torch
    has flex attention's forward only: its backward row says so and is not counted.
(b) 30 updates of the paper's baseline config (or the tiny one) on synthetic tokens through
    the real packer and loader, compiled on CUDA (torch.compile dynamic=False): tokens/s and
    MFU over the updates after the first 10 (compilation, warm-up), the device name and its
    dense bf16 peak, peak memory, and the share of update time spent waiting for the loader.
(c) a real checkpoint at update 20, restored into a fresh model, optimizers and loader;
    updates 21-30 compared with the uninterrupted run. CPU kernels are deterministic: the
    losses must be equal. CUDA kernels are not bitwise deterministic (atomic adds in the
    embedding and attention backward passes): each loss may differ by at most 0.01 nats.
(d) writes DIR/gpu_check.json and prints a Markdown table (also DIR/gpu_check.md).

Exit status 0 when every counted check passes, 1 when one fails, 2 on bad arguments.
"""
import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

CUDA_LOSS_TOL = 0.01  # nats per update, resumed vs uninterrupted, on CUDA
TINY = {"depth": 2, "width": 32, "heads": 2, "kv_heads": 2, "context": 64, "short_window": 32, "vocab": 256,
        "micro_rows": 4, "accum": 2, "buffer": 100}
PAPER_ATTN = {"batch": 2, "heads": 4, "T": 2048, "head_dim": 128, "window": 1024}
TINY_ATTN = {"batch": 1, "heads": 2, "T": 128, "head_dim": 16, "window": 32}


def synthetic_stream(vocab, context, docs, seed=0):
    """Random documents (BOS + Zipf-distributed tokens, so there is something to learn;
    log-normal lengths, some longer than a row) in refills of 128: a corpus-free stand-in
    with the packer's real work to do."""
    from loaders.stream import DocumentStream

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(context / 3), 1.2, docs).astype(np.int64), 2, 8 * context)
    flat = ((rng.zipf(1.2, int(lengths.sum())) - 1) % (vocab - 4)).astype(np.uint16)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    bos = vocab - 4  # the tokenizer's <|reserved_0|>
    flat[offsets] = bos
    refills = np.append(np.arange(0, docs, 128), docs)
    return DocumentStream(lengths, refills, ([flat], np.zeros(docs, dtype=np.int64), offsets), bos=bos,
                          name="synthetic")


def rel_err(a, ref):
    return ((a.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_attention(device, shapes):
    """Flex and SDPA-with-mask in bf16 against float64, forward and backward."""
    from training.model import AttentionBackend, window_mask

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
    if torch.device(device).type == "cuda":
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compile(flex_attention, dynamic=False)
        mask = flex.mask("flex", T, w, torch.device(device))
        flex_fn = lambda a, b, c: compiled(a, b, c, block_mask=mask)  # noqa: E731 - as the compiled model runs it
    else:
        flex_fn = lambda a, b, c: flex(a, b, c, w)  # noqa: E731
    rows = []
    s_out, s_grads = run(lambda a, b, c: dense(a, b, c, w), torch.bfloat16)
    flex_bwd = torch.device(device).type == "cuda"  # torch 2.13: no flex backward on CPU
    f_out, f_grads = run(flex_fn, torch.bfloat16, grad=flex_bwd)
    e_s, e_f = rel_err(s_out, ref_out), rel_err(f_out, ref_out)
    # bf16 keeps ~3 significant digits: flex passes when it is as close to float64 as SDPA
    tol = max(2 * e_s, 1e-2)
    rows.append({"check": "attention forward, flex vs float64 (rel. Frobenius)", "value": e_f,
                 "criterion": f"<= {tol:.2e} (2 x SDPA's {e_s:.2e}, at least 1e-2)", "pass": e_f <= tol})
    rows.append({"check": "attention forward, flex vs SDPA-with-mask (max abs)",
                 "value": (f_out.float() - s_out.float()).abs().max().item(), "criterion": "reported", "pass": None})
    for name, sg, fg, rg in zip("qkv", s_grads, f_grads or [None] * 3, ref_grads):
        e_s = rel_err(sg, rg)
        tol = max(2 * e_s, 1e-2)
        if fg is None:
            rows.append({"check": f"attention backward d{name}, SDPA-with-mask vs float64", "value": e_s,
                         "criterion": "<= 1e-2 (flex backward: not in torch on CPU)", "pass": e_s <= 1e-2})
        else:
            e_f = rel_err(fg, rg)
            rows.append({"check": f"attention backward d{name}, flex vs float64", "value": e_f,
                         "criterion": f"<= {tol:.2e} (2 x SDPA's {e_s:.2e}, at least 1e-2)", "pass": e_f <= tol})
    return rows


def make_run(cfg, device, stream):
    from loaders.batches import MicrobatchLoader
    from loaders.packers import Packer
    from training.trainer import Trainer

    tr = Trainer(cfg, device)
    loader = MicrobatchLoader(Packer(stream, cfg.loader, cfg.context + 1, cfg.buffer, seed=cfg.random_span_seed),
                              cfg.micro_rows, device=device, prefetch=cfg.prefetch)
    return tr, loader


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def check_training(cfg, device, out, updates, resume_at, warmup=10):
    from train import peak_memory_mib, reset_peak_memory
    from training.checkpoint import load_checkpoint, rng_states, save_checkpoint, set_rng_states
    from training.config import config_sha256
    from training.mfu import device_name, peak_flops
    from tqdm import tqdm

    need_rows = (updates + 2) * cfg.accum * cfg.micro_rows
    stream = synthetic_stream(cfg.vocab, cfg.context, docs=max(4000, 3 * need_rows * (cfg.context + 1) // (cfg.context // 3 + 1)))
    torch.manual_seed(cfg.seed)
    reset_peak_memory(device)
    tr, loader = make_run(cfg, device, stream)
    losses, times, waits = [], [], []
    ckpt = None
    for step in tqdm(range(updates), desc="gpu_check: uninterrupted", unit="upd"):
        t0 = time.time()
        loss, _ = tr.update(loader, step, updates)
        sync(device)
        times.append(time.time() - t0)
        waits.append(tr.last_wait)
        losses.append(loss)
        if step + 1 == resume_at:
            ckpt = save_checkpoint(out, resume_at, {**tr.state_dict(), "loader": loader.state_dict(), "rng": rng_states(),
                                                    "step": resume_at, "config": cfg.to_dict(),
                                                    "config_sha256": config_sha256(cfg.to_dict())}, keep=1)
    final = {k: v.detach().float().cpu() for k, v in tr.model.state_dict().items()}
    peak = peak_memory_mib(device)
    loader.close()
    del tr, loader
    # (c) a fresh model, optimizers and loader from the checkpoint file
    payload = load_checkpoint(ckpt)
    tr, loader = make_run(cfg, device, stream)
    tr.load_state_dict(payload)
    loader.load_state_dict(payload["loader"])
    set_rng_states(payload["rng"])
    resumed = []
    for step in tqdm(range(resume_at, updates), desc="gpu_check: resumed", unit="upd"):
        resumed.append(tr.update(loader, step, updates)[0])
    loader.close()
    again = {k: v.detach().float().cpu() for k, v in tr.model.state_dict().items()}
    dloss = max(abs(a - b) for a, b in zip(losses[resume_at:], resumed))
    dparam = max(((again[k] - final[k]).norm() / final[k].norm().clamp_min(1e-30)).item() for k in final)
    timed = times[warmup:]
    tps = len(timed) * cfg.targets_per_update / sum(timed)
    fpt = tr.model.flops_per_token()
    peak_f = peak_flops(device)
    cuda = torch.device(device).type == "cuda"
    tol = CUDA_LOSS_TOL if cuda else 0.0
    rows = [
        {"check": "device", "value": device_name(device), "criterion": "reported", "pass": None},
        {"check": f"tokens/s (updates {warmup + 1}-{updates}, compile {'on' if tr.fwd is not tr.model else 'off'})",
         "value": tps, "criterion": "reported", "pass": None},
        {"check": "MFU (dense bf16 peak of the device)",
         "value": (fpt * tps / peak_f) if peak_f else None,
         "criterion": f"peak {peak_f / 1e12:.0f} TFLOP/s" if peak_f else "no peak known for this device",
         "pass": None},
        {"check": "peak memory MiB (" + ("GPU allocated" if cuda else "CPU resident") + ")", "value": peak,
         "criterion": "reported", "pass": None},
        {"check": "loader wait share of update time", "value": sum(waits) / sum(times), "criterion": "reported",
         "pass": None},
        {"check": f"loss falls (mean of updates 1-3 vs {updates - 2}-{updates})",
         "value": float(np.mean(losses[:3]) - np.mean(losses[-3:])), "criterion": "> 0", "pass":
             bool(np.mean(losses[-3:]) < np.mean(losses[:3]))},
        {"check": f"resume at {resume_at}: max abs loss difference, updates {resume_at + 1}-{updates}", "value": dloss,
         "criterion": f"<= {tol:g}" + (" (CUDA kernels are not bitwise deterministic)" if cuda else " (CPU: bitwise)"),
         "pass": dloss <= tol},
        {"check": f"resume at {resume_at}: parameters after {updates} (max rel. Frobenius)", "value": dparam,
         "criterion": "reported" if cuda else "== 0 (CPU: bitwise)", "pass": None if cuda else dparam == 0.0},
    ]
    extra = {"losses": losses, "resumed_losses": resumed, "update_seconds": times, "flops_per_token": fpt,
             "targets_per_update": cfg.targets_per_update, "peak_flops": peak_f}
    return rows, extra


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def table(rows, header) -> str:
    lines = [header, "", "| Check | Value | Criterion | Pass |", "|---|---:|---|---|"]
    for r in rows:
        ok = {True: "yes", False: "**NO**", None: ""}[r["pass"]]
        lines.append(f"| {r['check']} | {fmt(r['value'])} | {r['criterion']} | {ok} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    from corpus.atomic import atomic_write_json, atomic_write_text
    from training.config import resolve_config

    ap = argparse.ArgumentParser(prog="python -m training.gpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/gpu_check", help="folder for gpu_check.json, gpu_check.md and the checkpoint")
    ap.add_argument("--device", default=None, help="cuda (default when available), cuda:N or cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny model and attention shapes (for CPU CI)")
    ap.add_argument("--config", default=None, help="training config (default: the paper's baseline, seed 43)")
    ap.add_argument("--updates", type=int, default=30, help="updates to run (default 30)")
    ap.add_argument("--resume-at", type=int, default=20, help="checkpoint and resume at this update (default 20)")
    ap.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                    help="torch.compile the model: auto = on for CUDA, off on CPU")
    a = ap.parse_args(argv)
    device = a.device or ("cuda" if torch.cuda.is_available() else None)
    if device is None:
        print("error: no CUDA device here; run on a GPU, or give --device cpu --tiny", file=sys.stderr)
        return 2
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        print(f"error: --device {device}: this torch build or machine has no CUDA", file=sys.stderr)
        return 2
    if not 0 < a.resume_at < a.updates or a.updates <= 10:
        print("error: need 10 < --updates and 0 < --resume-at < --updates", file=sys.stderr)
        return 2
    from corpus.errors import DataError

    try:
        if a.config:
            cfg = resolve_config(a.config, [f"device={device}", f"compile={a.compile}", "prefetch=1"])
        else:
            over = {"name": "gpu_check", "device": device, "compile": a.compile, "prefetch": 1,
                    **(TINY if a.tiny else {})}
            cfg = resolve_config(None, [f"{k}={v}" for k, v in over.items()])
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    attn = check_attention(device, TINY_ATTN if a.tiny else PAPER_ATTN)
    train_rows, extra = check_training(cfg, device, out, a.updates, a.resume_at)
    rows = attn + train_rows
    seconds = time.time() - t0
    from training.mfu import device_name

    header = (f"GPU-path check, {time.strftime('%Y-%m-%d', time.gmtime())}, {device_name(device)}, torch "
              f"{torch.__version__}, {'tiny' if a.tiny else 'paper'} shapes, {seconds:.0f} s")
    counted = [r["pass"] for r in rows if r["pass"] is not None]
    ok = all(counted)
    result = {"device": device_name(device), "torch": torch.__version__, "tiny": a.tiny, "seconds": seconds,
              "config": cfg.to_dict(), "attention_shapes": TINY_ATTN if a.tiny else PAPER_ATTN,
              "rows": [{**r, "value": r["value"] if not (isinstance(r["value"], float) and not math.isfinite(r["value"]))
                        else None} for r in rows],
              "passed": ok, **extra}
    atomic_write_json(out / "gpu_check.json", result)
    md = table(rows, header)
    atomic_write_text(out / "gpu_check.md", md)
    print("\n" + md)
    print(f"{'all checks pass' if ok else 'SOME CHECKS FAIL'}; wrote {out}/gpu_check.json and gpu_check.md")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
