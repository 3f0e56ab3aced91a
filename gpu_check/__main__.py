"""One command that checks the GPU path of the training core and measures it.

  python -m gpu_check [--out DIR]                 # on a CUDA GPU, the paper's model
  python -m gpu_check --device cpu --tiny         # every part on CPU, tiny shapes (the test suite)

Parts (gpu_check/parts.py), each pass/fail with its numbers; a part that raises is
recorded as failed and the others still run:
  attention  flex attention (sliding-window block mask) and SDPA with the dense mask in bf16
             against float64, forward and backward (paper shapes: heads 4, head dim 128,
             context 2048, window 1024). On CPU torch has flex's forward only.
  train      the real train.py, `--updates` updates (default 30) of the paper's baseline
             config (or the tiny one) on the offline corpus (prepared here when --data-dir has
             none: no download), compiled with bf16 autocast on CUDA as train.py does:
             tokens/s and MFU over the updates after the 11 untimed ones, peak memory, loader
             wait, compiled graphs, graph breaks and recompiles, the dtypes at attention.
  scoring    the official score of that run's final checkpoint scored afresh (eval.official)
             and judged as the protocol's re-scoring gate judges: per-row nats, bytes and
             counts, the stream's fingerprint and the summary's score bitwise equal to train.py's
             own; and one window batch (position bins, padded targets) through eval's scoring
             against sums done in numpy.
  resume     train.py --resume from the checkpoint at `--resume-at` in a fresh folder: the
             next updates equal the uninterrupted run's (bitwise on CPU; within 0.01 nats on
             CUDA, whose kernels are not bitwise deterministic).
  queue      two queue shards (last microbatches of different sizes) screened, trained and
             measured by the queue runner on the device: compiled where training is, the
             second shard compiles no new graph.
  ddp        with more than one GPU visible: torchrun with 2 ranks (NCCL), the loss against
             the one-process run within the tolerance the CPU DDP test measured.

Writes DIR/gpu_check.json and DIR/gpu_check.md (the table, also printed).
Exit status 0 when every judged check passes, 1 when one fails, 2 on bad arguments.
"""
import argparse
import math
import sys
import time
from pathlib import Path

import prepare
from console.shutdown import skip_final_collections
from console.usage import prog_name
from corpus.atomic import atomic_write_json, atomic_write_text
from errors import DataError
from corpus.layout import Layout
from presets.shapes import CHECK_TINY

# Late imports: torch, the parts and the training core load inside the functions that use them, after
# parsing: `--help` answers without them (torch takes seconds to import)

TINY = {**CHECK_TINY, "micro_rows": 4, "accum": 2, "buffer": 100, "eval_batches": 2, "eval_rows": 4}
PAPER_RUN = {"eval_batches": 8}  # the official score on 8 x 64 rows: minutes of the check, not of scoring
PAPER_ATTN = {"batch": 2, "heads": 4, "T": 2048, "head_dim": 128, "window": 1024}
TINY_ATTN = {"batch": 1, "heads": 2, "T": 128, "head_dim": 16, "window": 32}
TINY_DATA = ["--max-files", "40", "--shards", "3", "--row-group-size", "150"]
PAPER_DATA = ["--max-files", "300", "--shards", "4"]


def ensure_data(data_dir, vocab, out, tiny, log):
    """(data root, vocab) of a prepared offline corpus: data_dir's, or one prepared under out."""
    if data_dir:
        return str(data_dir), Layout(data_dir, "stdlib").prepared()["vocab_size"]

    d = out / "data"
    log(f"gpu_check: preparing a small offline corpus (vocab {vocab}) in {d}")
    if prepare.main(["--source", "stdlib", "--data-dir", str(d), "--vocab-size", str(vocab),
                     *(TINY_DATA if tiny else PAPER_DATA)]):
        raise DataError(f"{d}: preparing the offline corpus failed")
    return str(d), vocab


def run_parts(ctx, names):
    from gpu_check.parts import PARTS

    results = {}
    for name in names:
        t0 = time.time()
        try:
            rows = PARTS[name](ctx)
        except Exception as e:  # recorded: the other parts still run
            rows = [{"check": f"{name}: raised", "value": f"{type(e).__name__}: {str(e)[:300]}",
                     "criterion": "no exception", "pass": False}]
        judged = [r["pass"] for r in rows if r["pass"] is not None]
        results[name] = {"passed": all(judged), "seconds": time.time() - t0, "rows": rows}
    return results


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def table(results, header) -> str:
    lines = [header, "", "| Part | Check | Value | Criterion | Pass |", "|---|---|---:|---|---|"]
    for name, part in results.items():
        for r in part["rows"]:
            ok = {True: "yes", False: "**NO**", None: ""}[r["pass"]]
            lines.append(f"| {name} | {r['check']} | {fmt(r['value'])} | {r['criterion']} | {ok} |")
    return "\n".join(lines) + "\n"


def finite(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def parse(argv):
    ap = argparse.ArgumentParser(prog=prog_name("python -m gpu_check"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/gpu_check", help="folder for gpu_check.json, gpu_check.md and the runs")
    ap.add_argument("--device", default=None, help="cuda (default when available), cuda:N or cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny model and attention shapes (for CPU, the test suite)")
    ap.add_argument("--config", default=None, help="training config (default: the paper's baseline, seed 43)")
    ap.add_argument("--data-dir", default=None,
                    help="a data root with the offline corpus prepared (default: prepare a small one under --out)")
    ap.add_argument("--updates", type=int, default=30, help="updates to run (default 30)")
    ap.add_argument("--resume-at", type=int, default=20, help="checkpoint and resume at this update (default 20)")
    ap.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                    help="torch.compile the model: auto = on for CUDA, off on CPU")
    ap.add_argument("--parts", default=None, help="comma list of parts (default: all, in the order above)")
    return ap.parse_args(argv)


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    a = parse(argv)
    import torch

    from gpu_check.parts import PARTS
    from training.config import resolve_config
    from training.device import configure, resolve_device
    from training.mfu import device_name

    if a.device is None and not torch.cuda.is_available():
        print("error: no CUDA device here; run on a GPU, or give --device cpu --tiny", file=sys.stderr)
        return 2
    names = [n.strip() for n in a.parts.split(",") if n.strip()] if a.parts is not None else list(PARTS)
    bad = [n for n in names if n not in PARTS]
    if bad or not names:
        print(f"error: --parts: {', '.join(bad) or 'empty'} not among {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if not 0 < a.resume_at < a.updates or a.updates <= 11:
        print("error: need 11 < --updates (11 updates are untimed warm-up) and 0 < --resume-at < --updates",
              file=sys.stderr)
        return 2
    out = Path(a.out)
    try:
        device = resolve_device(a.device or "cuda", "--device")
        configure(device)
        out.mkdir(parents=True, exist_ok=True)
        run = {"name": "gpu_check", "device": device, "compile": a.compile, "prefetch": 1, "updates": a.updates,
               "checkpoint_every": a.resume_at, "keep_checkpoints": 2, **(TINY if a.tiny else PAPER_RUN)}
        given = resolve_config(a.config, ["vocab=300"] if a.tiny and not a.config else [])
        need = names != ["attention"]  # every other part reads the corpus
        data_dir, vocab = ensure_data(a.data_dir, given.vocab, out, a.tiny, print) if need else ("", given.vocab)
        if a.tiny:
            run["vocab"] = vocab  # the tiny model follows the tiny corpus
        cfg = resolve_config(a.config, [f"{k}={v}" for k, v in {**run, "data_dir": data_dir}.items()])
        if cfg.vocab != vocab:
            raise DataError(f"--data-dir {data_dir}: vocab {vocab}, the config needs {cfg.vocab}")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ctx = {"cfg": cfg, "device": device, "out": out, "data_dir": data_dir, "resume_at": a.resume_at,
           "attention_shapes": TINY_ATTN if a.tiny else PAPER_ATTN, "log": print}
    t0 = time.time()
    threads = torch.get_num_threads()
    if a.tiny and device == "cpu":
        torch.set_num_threads(1)  # tiny matrices: a second thread costs more in handoffs than it computes
    try:
        results = run_parts(ctx, names)
    finally:
        torch.set_num_threads(threads)
    seconds = time.time() - t0
    header = (f"GPU-path check, {time.strftime('%Y-%m-%d', time.gmtime())}, {device_name(device)}, torch "
              f"{torch.__version__}, {'tiny' if a.tiny else 'paper'} shapes, {seconds:.0f} s")
    ok = all(p["passed"] for p in results.values())
    atomic_write_json(out / "gpu_check.json", {
        "device": device_name(device), "torch": torch.__version__, "tiny": a.tiny, "seconds": seconds,
        "config": cfg.to_dict(), "attention_shapes": ctx["attention_shapes"], "passed": ok,
        "parts": {n: {**p, "rows": [{**r, "value": finite(r["value"])} for r in p["rows"]]} for n, p in results.items()}})
    md = table(results, header)
    atomic_write_text(out / "gpu_check.md", md)
    print("\n" + md)
    print(f"{'all checks pass' if ok else 'SOME CHECKS FAIL'}; wrote {out}/gpu_check.json and gpu_check.md")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
