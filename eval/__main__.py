"""Evaluate finished training runs: source windows, confirmation, comparisons, rankings.

  python -m eval --runs runs/main/train [--data-dir DIR] [--out runs/main/eval]

For every run folder under --runs (summary.json + final checkpoint):
  windows_dev.parquet, windows_conf.parquet   per-window, per-bin sufficient statistics
  confirmation_rows.parquet                   official-style score of the confirmation stream
Then, across runs: window comparisons (5.5), the confirmation table (5.4), prefix rankings
(5.6), each as JSON + Markdown, plus evidence files (.npz) that the numpy checkers
verify offline. Populations: validation rows 0:38016 (dev) and 49152:84992 (conf) for
climbmix; the two halves of the validation shard for the offline corpus.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from corpus.errors import DataError

CONDITION_OF = {"original": "baseline", "random_span": "random_crop", "segment_first": "segmented", "lossless": "lossless"}


def write_window_stats(path, win, stats, meta):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from corpus.atomic import atomic_write_bytes

    cols = {k: win[k] for k in ("source_index", "source_row", "source_len", "stratum", "kind")}
    nb = stats["nats"].shape[1]
    for b in range(nb):
        cols[f"nats_{b}"], cols[f"bytes_{b}"], cols[f"count_{b}"] = stats["nats"][:, b], stats["bytes"][:, b], stats["count"][:, b]
    t = pa.table(cols).replace_schema_metadata({k: str(v) for k, v in {**meta, "bins": nb}.items()})
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def find_runs(runs_dir):
    out = []
    for s in sorted(Path(runs_dir).glob("*/summary.json")):
        res = json.loads(s.read_text())
        ckpt = s.parent / f"ckpt_{res['updates']:06d}.pt"
        if ckpt.exists():
            out.append((s.parent, res, ckpt))
    if not out:
        raise DataError(f"{runs_dir}: no finished runs (folders with summary.json and their final checkpoint)")
    return out


def main(argv=None):

    from corpus.atomic import atomic_write_text
    from corpus.layout import Layout, default_data_dir
    from corpus.tokenizer import load_token_bytes
    from eval.confirmation import find_duplicates
    from eval.plan import evaluation_plan
    from eval.windows import WindowSpec, build_windows
    from loaders.stream import open_split
    from training.config import TrainConfig

    ap = argparse.ArgumentParser(prog="python -m eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="folder of run folders (e.g. runs/main/train)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=None, help="results folder (default: <runs>/../eval)")
    ap.add_argument("--replicates", type=int, default=10000, help="bootstrap replicates (default 10000)")
    ap.add_argument("--per-stratum", type=int, default=None,
                    help="sources sampled per stratum (default 256 for climbmix as the paper; 64 for the offline "
                         "corpus, whose CPU scoring with an 8192-token head costs about 10 ms per window)")
    ap.add_argument("--protocol", default=None,
                    help="a frozen protocol (protocols/freeze.py): its hash, runs, data and every checkpoint's "
                         "official check are verified before any confirmation forward pass, and its parameters are used")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        runs = find_runs(a.runs)
        cfg0 = TrainConfig(**runs[0][1]["config"])
        dd = a.data_dir or cfg0.data_dir or str(default_data_dir())
        lay = Layout(dd, cfg0.source)
        tb = load_token_bytes(lay.tokenizer)
        n_val = len(open_split(dd, cfg0.source, "val").lengths)
        if a.protocol:
            from protocols.protocol import check_before_confirmation, load_protocol

            proto = load_protocol(a.protocol)
            check_before_confirmation(proto, runs, lay, log=print)
            plan = proto["evaluation"]
        else:
            plan = evaluation_plan(cfg0.source, n_val, cfg0.context, cfg0.eval_rows, cfg0.eval_batches,
                                   a.per_stratum, a.replicates)
        pops = plan["populations"]
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out or Path(a.runs).parent / "eval")
    out.mkdir(parents=True, exist_ok=True)
    print(f"evaluating {len(runs)} runs from {a.runs} -> {out}")
    dups = find_duplicates(dd, cfg0.source, tuple(pops["conf"]["rows"]))
    print(f"confirmation rows {pops['conf']['rows'][0]}:{pops['conf']['rows'][1]}: {len(dups)} exact duplicates excluded")
    streams = {p: open_split(dd, cfg0.source, "val", row_range=tuple(v["rows"]),
                             exclude=[r for r, _ in dups] if p == "conf" else ()) for p, v in pops.items()}
    specs = {p: WindowSpec.for_context(cfg0.context, v["seed"], plan["per_stratum"]) for p, v in pops.items()}
    wins = {p: build_windows(streams[p], specs[p]) for p in pops}
    try:
        conf = score_checkpoints(runs, cfg0, wins, specs, streams["conf"], plan, tb, out, a.device)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = [f"# Evaluation of {len(runs)} checkpoints", ""]
    report += window_reports(runs, wins, specs, pops, plan, dups, out)
    report += confirmation_report(conf, dups, pops, plan["confirmation_batches"] * cfg0.eval_rows * cfg0.context, out)
    report += ranking_report(runs, cfg0.context, plan, out)
    atomic_write_text(out / "report.md", "\n".join(report))
    print("\n".join(report))
    print(f"wrote {out}/report.md, window_summary_*.json, confirmation.json, rankings.json and evidence files "
          f"({time.time() - t0:.0f}s)")
    return 0


def _done(path, sha, fingerprint=None):
    """A statistics file already written for this checkpoint (and window sample): an interrupted evaluation resumes."""
    import pyarrow.parquet as pq

    if not path.exists():
        return False
    meta = pq.read_schema(path).metadata or {}
    return meta.get(b"checkpoint_sha256", b"").decode() == sha and (
        fingerprint is None or meta.get(b"fingerprint", b"").decode() == fingerprint)


def score_checkpoints(runs, cfg0, wins, specs, conf_stream, plan, tb, out, device):
    """Per checkpoint: window statistics of both populations and the confirmation rows. Returns confirmation scores."""
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from corpus.atomic import sha256_file
    from eval.official import row_statistics, scores, write_stats
    from eval.windows import score_windows
    from training.checkpoint import load_checkpoint
    from training.config import TrainConfig
    from training.trainer import build_model, maybe_compile

    conf = {}
    ac = torch.device(device).type == "cuda"
    for run_dir, res, ckpt in tqdm(runs, desc="checkpoints"):
        cfg = TrainConfig(**res["config"])
        if cfg.context != cfg0.context or cfg.source != cfg0.source:
            raise DataError(f"{run_dir}: runs differ in context or corpus")
        cond, sha = CONDITION_OF[cfg.loader], sha256_file(ckpt)
        ed = out / run_dir.name
        ed.mkdir(exist_ok=True)
        model = None

        def loaded():
            nonlocal model
            if model is None:
                model = build_model(cfg, device)
                model.load_state_dict(load_checkpoint(ckpt)["model"])
                model = maybe_compile(model, cfg, device)
            return model

        for p in wins:
            path = ed / f"windows_{p}.parquet"
            if not _done(path, sha, wins[p]["fingerprint"]):
                st = score_windows(loaded(), wins[p], tb, specs[p], device, ac)
                write_window_stats(path, wins[p], st, {
                    "condition": cond, "seed": cfg.seed, "checkpoint_sha256": sha, "fingerprint": wins[p]["fingerprint"],
                    "population": p, "rows": json.dumps(plan["populations"][p]["rows"]),
                    "spec": json.dumps(specs[p].to_dict())})
        path = ed / "confirmation_rows.parquet"
        if _done(path, sha):
            t = pq.read_table(path)
            cs = {k: t.column(k).to_numpy() for k in ("nats", "bytes", "count")}
            cs["fingerprint"] = t.schema.metadata[b"fingerprint"].decode()
        else:
            cs = row_statistics(loaded(), conf_stream, tb, plan["confirmation_batches"], cfg.eval_rows, cfg.context + 1,
                                device, ac, cfg.buffer)
            write_stats(path, cs, {"checkpoint_sha256": sha, "condition": cond, "seed": cfg.seed})
        conf[(cond, cfg.seed)] = {**scores(cs), "fingerprint": cs["fingerprint"]}
    return conf


def window_reports(runs, wins, specs, pops, plan, dups, out):
    """Section 5.5: comparisons per population, written as JSON, evidence and Markdown."""
    from corpus.atomic import atomic_write_json
    from eval.compare import compare_windows, window_table_md, write_evidence
    from eval.windows import counts_per_stratum

    report = []
    for p in pops:
        paths = [out / r[0].name / f"windows_{p}.parquet" for r in runs]
        summary, ev = compare_windows(paths, contrast_strata=plan["contrast_strata"], replicates=plan["replicates"],
                                      alpha=plan["alpha"], seed=plan["bootstrap_seed"])
        summary["per_stratum"] = counts_per_stratum(wins[p], specs[p])
        summary["duplicates_excluded"] = [{"row": r, "duplicate_of": w} for r, w in dups] if p == "conf" else []
        atomic_write_json(out / f"window_summary_{p}.json", summary)
        write_evidence(out / f"window_evidence_{p}.npz", ev, summary)
        report += [f"## Source windows: {p} (rows {pops[p]['rows'][0]}:{pops[p]['rows'][1]}, seed {pops[p]['seed']})", "",
                   "| stratum | sources | tail windows |", "|---|---:|---:|"]
        report += [f"| {c['stratum']} | {c['sources']} | {c['tail_windows']} |" for c in summary["per_stratum"]]
        report += ["", window_table_md(summary)]
    return report


def confirmation_report(conf, dups, pops, targets, out):
    """Section 5.4: the official-style score of the confirmation stream, deltas against the same-seed baseline."""
    from corpus.atomic import atomic_write_json

    report = ["## Official-style confirmation score", "", f"{targets:,} targets; {len(dups)} exact duplicates excluded.", "",
              "| Condition | Seed | BPB | Delta vs same-seed control | CE | Perplexity |", "|---|---:|---:|---:|---:|---:|"]
    for (cond, seed), s in sorted(conf.items(), key=lambda kv: (kv[0][1], kv[0][0] != "baseline", kv[0][0])):
        base = conf.get(("baseline", seed))
        d = s["bpb"] - base["bpb"] if base else float("nan")
        report.append(f"| {cond} | {seed} | {s['bpb']:.8f} | {d:+.8f} | {s['ce']:.8f} | {s['perplexity']:.5f} |")
    fps = {s["fingerprint"] for s in conf.values()}
    report += ["", f"Input/target fingerprint: {'one for all checkpoints: ' + next(iter(fps)) if len(fps) == 1 else 'DIFFERS'}", ""]
    atomic_write_json(out / "confirmation.json", {"rows": pops["conf"]["rows"], "duplicates": dups, "targets": targets,
                                                  "scores": [{"condition": c, "seed": s, **v} for (c, s), v in conf.items()]})
    return report


def ranking_report(runs, context, plan, out):
    """Section 5.6: every run ranked on its official-stream rows, in full and at prefixes."""
    import io

    import pyarrow.parquet as pq

    from corpus.atomic import atomic_write_bytes, atomic_write_json
    from eval.rankings import prefix_rows, rankings, rankings_md

    names, nats, nbytes = [], [], []
    for run_dir, _, _ in runs:
        t = pq.read_table(run_dir / "official_rows.parquet")
        names.append(run_dir.name)
        nats.append(t.column("nats").to_numpy())
        nbytes.append(t.column("bytes").to_numpy())
    nats, nbytes = np.stack(nats), np.stack(nbytes)
    ref = next((n for n in names if n.startswith("baseline")), names[0])
    pre = prefix_rows(nats.shape[1], context)
    rk = rankings(nats, nbytes, names, ref, pre, subsets=plan["ranking_subsets"], seed=plan["ranking_seed"])
    atomic_write_json(out / "rankings.json", rk)
    buf = io.BytesIO()
    np.savez(buf, nats=nats, bytes=nbytes, names=np.asarray(names), reference=np.asarray(ref), prefixes=np.asarray(pre))
    atomic_write_bytes(out / "ranking_evidence.npz", buf.getvalue())
    return ["## Rankings on the official stream at prefixes", "", rankings_md(rk, context)]


if __name__ == "__main__":
    sys.exit(main())
