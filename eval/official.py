"""The official validation metric (the supplied baseline's evaluation).

The original packer over the validation shard from its start, `batches` batches of `rows`
rows. BPB = sum of nats over targets with token_bytes > 0 / (ln 2 * sum of token_bytes of
all targets); CE = those nats / their count; perplexity = exp(CE). Per row the sufficient
statistics (nats, bytes, counted targets) are kept, with the SHA256 of the input/target
token ids, so two evaluations of one checkpoint compare exactly.

  python -m eval.official CHECKPOINT [--data-dir DIR] [--out stats.parquet]
"""
import argparse
import hashlib
import math
import sys
from pathlib import Path

import numpy as np

from console.shutdown import skip_final_collections
from console.usage import prog_name
from corpus.atomic import atomic_write_bytes, sha256_file
from corpus.layout import Layout, default_data_dir
from errors import DataError, check_out_file, os_error_line
from loaders.packers import Packer

# Late imports: torch, the model, pyarrow and tqdm load inside the functions that use them: `--help` answers
# without them (torch alone takes seconds to import)


def score_fixed_shape(model, x, y, token_bytes, edges, device, autocast=False, batch=None):
    """score_rows on a batch padded to `batch` rows (padding targets -1 count nowhere), so a
    compiled model (dynamic=False) sees one shape and a last, smaller batch never recompiles."""
    from eval.scoring import score_rows

    n = len(x)
    if batch is not None and n < batch:
        x = np.concatenate([x, np.zeros((batch - n, x.shape[1]), dtype=x.dtype)])
        y = np.concatenate([y, np.full((batch - n, y.shape[1]), -1, dtype=y.dtype)])
    nats, nbytes, count = score_rows(model, x, y, token_bytes, edges, device, autocast)
    return nats[:n], nbytes[:n], count[:n]


def row_statistics(model, stream, token_bytes, batches, rows, R, device, autocast=False, buffer=1000, progress=False):
    """Per-row (nats, bytes, count) over the official stream, and its fingerprint."""
    packer = Packer(stream, "original", R, buffer)
    nats, nbytes, count = [], [], []
    h = hashlib.sha256()
    steps = range(batches)
    if progress:  # the command line shows its batches; callers inside a training run stay quiet
        from console.progress import bar

        steps = bar(steps, desc="official metric", unit="batch")
    for _ in steps:
        toks, _ = packer.next_rows(rows)
        h.update(toks.astype(np.int64).tobytes())
        n, b, c = score_fixed_shape(model, toks[:, :-1], toks[:, 1:].astype(np.int64), token_bytes, [0, R - 1], device,
                                    autocast, rows)
        nats.append(n[:, 0])
        nbytes.append(b[:, 0])
        count.append(c[:, 0])
    return {"nats": np.concatenate(nats), "bytes": np.concatenate(nbytes), "count": np.concatenate(count),
            "fingerprint": h.hexdigest()}


def scores(stats) -> dict:
    nats, nbytes, count = float(np.sum(stats["nats"])), int(np.sum(stats["bytes"])), int(np.sum(stats["count"]))
    ce = nats / count
    return {"bpb": nats / (math.log(2) * nbytes), "ce": ce, "perplexity": math.exp(ce), "counted_targets": count, "bytes": nbytes}


def write_stats(path, stats, meta: dict):
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = ("nats", "bytes", "count")
    table = pa.Table.from_arrays([_arrow_column(pa, stats[k]) for k in names], names=list(names))
    table = table.replace_schema_metadata({k: str(v) for k, v in {**meta, "fingerprint": stats["fingerprint"]}.items()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def _arrow_column(pa, values):
    """The column pa.array would make of a numeric vector, without pa.array: its first call in a process imports
    pandas (0.3 s of CPU in each torchrun rank 0 and `python -m eval.official` that writes its rows). The file's
    bytes are the same."""
    if not (type(values) is np.ndarray and values.ndim == 1 and values.dtype.kind in "iuf"
            and values.dtype.isnative):
        return pa.array(values)
    a = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def check_same_corpus(ckpt_path, payload, lay):
    """A checkpoint is scored only on the prepared corpus it was trained on."""
    from training.checkpoint import data_identity, data_mismatch

    why = data_mismatch(payload.get("data"), data_identity(lay))
    if why:
        raise DataError(f"{ckpt_path}: trained on another prepared corpus than {lay.root} ({why}); refusing to score")


def evaluate_checkpoint(ckpt_path, data_dir=None, device="cpu", progress=False):
    from corpus.tokenizer import load_token_bytes
    from loaders.stream import open_split
    from training.checkpoint import load_checkpoint
    from training.config import TrainConfig
    from training.trainer import bf16_enabled, build_model, maybe_compile

    payload = load_checkpoint(ckpt_path)
    try:
        cfg = TrainConfig(**payload["config"])
    except (KeyError, TypeError):
        raise DataError(f"{ckpt_path}: no usable training config in the checkpoint") from None
    dd = data_dir or cfg.data_dir or default_data_dir()
    check_same_corpus(ckpt_path, payload, Layout(dd, cfg.source))
    model = build_model(cfg, device)
    model.load_state_dict(payload["model"])
    stream = open_split(dd, cfg.source, "val")
    tb = load_token_bytes(Layout(dd, cfg.source).tokenizer)
    stats = row_statistics(maybe_compile(model, cfg, device), stream, tb, cfg.eval_batches, cfg.eval_rows, cfg.row_capacity, device,
                           autocast=bf16_enabled(cfg, device), buffer=cfg.eval_buffer, progress=progress)
    return stats, cfg


def checkpoint_argument_problem(path) -> str:
    """'' for a checkpoint file; for a run folder, a checkpoint's .json sidecar or another file, which checkpoint to
    pass."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.glob("ckpt_*.pt"))
        return (f"{p}: a folder; pass the checkpoint inside it"
                + (f", e.g. {found[-1]}" if found else " (ckpt_<updates>.pt; none there)"))
    if p.suffix == ".json" and p.with_suffix(".pt").exists():
        return f"{p}: a checkpoint's sidecar; pass the checkpoint {p.with_suffix('.pt')}"
    if p.is_file() and p.suffix != ".pt":  # a run's summary.json or log, say: not read as a checkpoint's sidecar
        found = sorted(p.parent.glob("ckpt_*.pt"))
        return f"{p}: not a checkpoint; pass a ckpt_<updates>.pt" + (f", e.g. {found[-1]}" if found else "")
    return ""


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(prog=prog_name("python -m eval.official"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="a training checkpoint (ckpt_<updates>.pt); its config names the corpus")
    ap.add_argument("--data-dir", default=None,
                    help="data root (default: the checkpoint's, else $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--device", default="auto", help="torch device: auto (cuda when available, else cpu), cpu, cuda or cuda:N")
    ap.add_argument("--out", default=None, help="write per-row sufficient statistics (parquet) here")
    a = ap.parse_args(argv)
    if why := checkpoint_argument_problem(a.checkpoint):
        print(f"error: {why}", file=sys.stderr)
        return 2
    from training.device import configure, resolve_device

    try:
        if a.out:  # before the evaluation: a folder there failed the write only after it, naming a temporary file
            check_out_file(a.out)
        device = resolve_device(a.device, "--device")
        configure(device)
        stats, cfg = evaluate_checkpoint(a.checkpoint, a.data_dir, device, progress=True)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e, a.checkpoint)}", file=sys.stderr)
        return 2
    s = scores(stats)
    print(f"{a.checkpoint}: BPB {s['bpb']:.8f}  CE {s['ce']:.8f}  perplexity {s['perplexity']:.5f}  "
          f"targets {len(stats['nats']) * cfg.context:,}  fingerprint {stats['fingerprint'][:16]}")
    if a.out:
        try:
            write_stats(a.out, stats, {"checkpoint_sha256": sha256_file(a.checkpoint)})
        except OSError as e:
            print(f"error: {os_error_line(e, a.out)}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
