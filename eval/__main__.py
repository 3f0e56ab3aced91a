"""Evaluate finished training runs: source windows, confirmation, comparisons, rankings.

  python -m eval --runs runs/main/train --protocol runs/main/protocol.json [--out runs/main/eval]
  python -m eval --runs runs/main/train --exploratory [--out DIR]     # no protocol: every output UNCONFIRMED

A confirmation pass needs a frozen protocol (python -m comparison.freeze): its hash, runs,
corpus and every checkpoint's official check are verified before any forward pass, and its
parameters (populations, seeds, contrasts, the ranked set, the stream checks) are used.
Code or judge files changed since the freeze are allowed (a fix must stay possible) but
named in eval_status.json and in every file's status: not a clean confirmation.
Without one, only an exploratory pass runs (--exploratory); it evaluates exactly the
finished runs present, names the configured runs that are absent, and labels every file,
table and figure as unconfirmed. Its runs are matched by their recorded configs: a folder
named as one of the six must hold that run (loader and seed), and runs that differ in
anything but loader and seed (budget, model, evaluation population) are refused, since
their deltas would not be the packer's.

Before scoring, the evaluation streams are replayed on CPU (the audit's packer replay):
the confirmation stream must emit no source longer than R (section 5.4) and the official
development stream none longer than 4096 scaled with the context (section 5.6), or nothing
is scored. Then, for every run: windows_dev.parquet, windows_conf.parquet (per-window,
per-bin sufficient statistics) and confirmation_rows.parquet; across runs: the
confirmation table (5.4), window comparisons (5.5), prefix rankings (5.6), each as JSON +
Markdown in report.md, four figures (three of section 5.5; the prefix rankings' when a
ranking is made; none with --no-figures), and evidence files (.npz) that the numpy checkers
verify offline. Populations: validation rows 0:38016 (dev) and 49152:84992 (conf) for
climbmix; the two halves of the validation shard for the offline corpus.
"""
import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

from console.shutdown import skip_final_collections
from console.terminal import for_terminal
from console.usage import interrupted_line, prog_name
from corpus.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_file
from corpus.layout import Layout, default_data_dir
from corpus.runlock import FolderLocked, folder_lock
from errors import DataError, check_out_folder, os_error_line
from eval.official import row_statistics, scores, write_stats
from eval.rankings import prefix_rows, rankings, rankings_md
from eval.stream_checks import audit_streams, require
from eval.windows import WindowSpec, build_windows, counts_per_stratum, score_windows
from presets.six import condition_of, run_names

# Late imports: torch, pyarrow, tqdm and the parts that load them (the model, the runs' configs, the plan, the
# streams, the protocol's checks, the figures) load inside the functions that use them: `--help` and a refused
# argument are answered without them (torch alone takes seconds to import)
UNCONFIRMED = "EXPLORATORY, UNCONFIRMED (no frozen protocol)"


def write_window_stats(path, win, stats, meta):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {k: win[k] for k in ("source_index", "source_row", "source_len", "stratum", "kind")}
    nb = stats["nats"].shape[1]
    for b in range(nb):
        cols[f"nats_{b}"], cols[f"bytes_{b}"], cols[f"count_{b}"] = stats["nats"][:, b], stats["bytes"][:, b], stats["count"][:, b]
    t = pa.table(cols).replace_schema_metadata({k: str(v) for k, v in {**meta, "bins": nb}.items()})
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=prog_name("python -m eval"), description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="folder of run folders (e.g. runs/main/train)")
    ap.add_argument("--data-dir", default=None, help="data root (default: the runs' own, else $PACKAUDIT_DATA)")
    ap.add_argument("--out", default=None, help="results folder (default: <runs>/../eval); locked while in use")
    ap.add_argument("--protocol", default=None,
                    help="a frozen protocol (comparison/freeze.py): a confirmation pass; its hash, runs, data and every "
                         "checkpoint's official check are verified before any forward pass, and its parameters are used")
    ap.add_argument("--exploratory", action="store_true",
                    help="evaluate without a protocol; every output is labelled unconfirmed")
    ap.add_argument("--replicates", type=int, default=None, help="bootstrap replicates, exploratory only (default 10000)")
    ap.add_argument("--per-stratum", type=int, default=None,
                    help="sources sampled per stratum, exploratory only (default 256 for climbmix as the paper; 64 for "
                         "the offline corpus, whose CPU scoring with an 8192-token head costs about 10 ms per window)")
    ap.add_argument("--no-figures", action="store_true",
                    help="skip the four PNGs (about 3 s of matplotlib on a small machine); JSON and Markdown are unchanged")
    ap.add_argument("--device", default="auto", help="torch device: auto (cuda when available, else cpu), cpu, cuda or cuda:N")
    return ap.parse_args(argv)


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    a = parse_args(argv)
    if a.protocol and a.exploratory:
        print("error: --protocol makes a confirmation pass and --exploratory an unconfirmed one; choose one", file=sys.stderr)
        return 2
    if not a.protocol and not a.exploratory:
        print("error: a confirmation pass needs a frozen protocol (--protocol FILE, written by python -m comparison.freeze); "
              "pass --exploratory for an unconfirmed look", file=sys.stderr)
        return 2
    fixed = [n for n, v in (("--replicates", a.replicates), ("--per-stratum", a.per_stratum)) if v is not None]
    if a.protocol and fixed:  # the protocol froze them: a pass under it with others would not be its pass
        print(f"error: {' and '.join(fixed)}: fixed by the protocol for a confirmation pass; drop "
              f"{'them' if len(fixed) > 1 else 'it'} (or pass --exploratory without --protocol)", file=sys.stderr)
        return 2
    for name, v in (("--replicates", a.replicates), ("--per-stratum", a.per_stratum)):
        if v is not None and v < 1:
            print(f"error: {name} must be >= 1, got {v}", file=sys.stderr)
            return 2
    from training.device import configure, resolve_device

    t0 = time.time()
    try:
        a.device = resolve_device(a.device, "--device")
        configure(a.device)
        out = Path(a.out or Path(a.runs).parent / "eval")
        ctx = prepare(a, out)
        with folder_lock(out, "an evaluation"):
            rc = evaluate(a, ctx, out)
    except (DataError, FolderLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # each run's statistics file is written whole, and a rerun reuses the finished ones
        print(interrupted_line("python -m eval", argv, "the statistics scored so far are kept"), file=sys.stderr)
        return 130
    print(f"({time.time() - t0:.0f}s)")
    return rc


def prepare(a, out):
    """Everything checked before an output folder is touched: runs, protocol, data, streams."""
    from corpus.tokenizer import load_token_bytes
    from eval.confirmation import confirmation_stream
    from eval.plan import complete_plan, evaluation_plan
    from eval.runs import check_matched, survey_runs
    from loaders.stream import open_split
    from training.config import TrainConfig

    runs, absent = survey_runs(a.runs)  # first: a mistyped --runs is named, not the default --out beside it
    if not runs:
        one = (Path(a.runs) / "summary.json").is_file()  # a run's own folder, not the folder of runs
        raise DataError(f"{a.runs}: no finished runs (folders with summary.json and their final checkpoint)"
                        + (f"; it is one run's folder: give the folder that holds the runs, --runs "
                           f"{Path(a.runs).absolute().parent}" if one else ""))
    check_out_apart(out, a.runs)
    if not a.protocol:
        check_folder_free(out, None)
    try:
        cfg0 = TrainConfig(**runs[0][1].config)
    except TypeError as e:
        raise DataError(f"{runs[0][0] / 'summary.json'}: config is not a training config ({e})") from None
    dd = a.data_dir or cfg0.data_dir or str(default_data_dir())
    lay = Layout(dd, cfg0.source)
    tb = load_token_bytes(lay.tokenizer)
    n_val = len(open_split(dd, cfg0.source, "val").lengths)
    notes = []
    if a.protocol:
        from protocols.protocol import check_before_confirmation, load_protocol, require_keys

        proto = load_protocol(a.protocol)
        require_keys(proto, a.protocol)
        check_folder_free(out, proto["_sha256"])  # before the corpus is hashed and every checkpoint re-scored
        changed = check_before_confirmation(proto, runs, lay, log=print)
        plan, notes = complete_plan(proto["evaluation"], list(proto["runs"]), cfg0.eval_rows, cfg0.eval_batches,
                                    cfg0.eval_buffer)
        status = f"confirmation under protocol {proto['name']} (SHA256 {proto['_sha256']}, frozen {proto['frozen_at_utc']})"
        if changed:  # the judge changed after the freeze: allowed (a fix must stay possible), never clean
            status += (f"; NOT A CLEAN CONFIRMATION: {len(changed)} hashed files changed since the freeze "
                       f"({', '.join(changed)})")
        if "judge_sha256" not in proto:  # frozen before the judge was hashed: its checkers were not held fixed
            status += "; the protocol predates judge_sha256: only its code was compared, not the checkers and rules"
        absent = []  # the protocol's runs are all present, or check_before_confirmation refused
    else:
        check_matched(runs)
        names = sorted(set(run_names()) | {r[0].name for r in runs})
        plan = evaluation_plan(cfg0.source, n_val, cfg0.context, cfg0.eval_rows, cfg0.eval_batches,
                               a.per_stratum, a.replicates or 10000, run_names=names, buffer=cfg0.eval_buffer)
        status = UNCONFIRMED
    pops = plan["populations"]
    streams = {p: open_split(dd, cfg0.source, "val", row_range=tuple(v["rows"])) for p, v in pops.items() if p != "conf"}
    streams["conf"], dups = confirmation_stream(dd, cfg0.source, pops["conf"]["rows"])
    checks = audit_streams(plan, {"dev": open_split(dd, cfg0.source, "val"), "conf": streams["conf"]}, cfg0.eval_rows)
    require(checks)
    if a.protocol:
        check_frozen_stream(plan, checks, streams["conf"])
        from eval.rescore import check_all_reproduce

        check_all_reproduce(runs, dd, a.device)
    return {"runs": runs, "absent": absent, "cfg0": cfg0, "changed": changed if a.protocol else [], "dd": dd, "tb": tb,
            "plan": plan, "notes": notes,
            "status": status, "dups": dups, "streams": streams, "checks": checks,
            "protocol_sha256": proto["_sha256"] if a.protocol else None}


def check_frozen_stream(plan, checks, conf_stream):
    """The confirmation stream is the one the protocol froze, to the document."""
    from eval.confirmation import stream_fingerprint

    want = plan.get("confirmation_fingerprint")
    if not want:
        raise DataError("the protocol freezes no confirmation stream fingerprint (frozen by an older version): "
                        "freeze it again before a confirmation pass")
    got = stream_fingerprint(conf_stream, checks["conf"]["fingerprint"])
    if got != want:
        raise DataError(f"{checks['conf']['stream']}: the confirmation stream's fingerprint "
                        f"{got[:16]}… is not the frozen {want[:16]}… (its documents "
                        f"differ from the protocol's); refusing to confirm")


def check_out_apart(out, runs_dir):
    """--out a folder of its own, checked before the streams are (seconds): not the runs' folder nor inside it, where
    a run's folder (finished or not) would get the report, figures and per-run statistics beside its checkpoints, and
    a later survey of the runs would meet the evaluation as one more folder."""
    check_out_folder(out)
    where, runs = Path(out).resolve(), Path(runs_dir).resolve()
    if where == runs or runs in where.parents:
        raise DataError(f"--out {out}: is {'the runs folder' if where == runs else 'inside the runs folder'}; an "
                        f"evaluation writes a folder of its own (default: eval beside the runs)")


def check_folder_free(out, protocol_sha256):
    """One kind of pass per folder: confirmed and unconfirmed results never mix, nor two protocols."""
    path = out / "eval_status.json"
    if path.exists():
        try:
            have = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            raise DataError(f"{path}: unreadable; this folder's earlier pass is unknown, use a fresh --out") from None
        if have.get("protocol_sha256") != protocol_sha256:
            raise DataError(f"{out} holds results of another pass ({have.get('status')}); use a fresh --out")


def claim_folder(out, ctx):
    """Checked again under the folder's lock (another pass may have claimed it since prepare), then claimed."""
    check_folder_free(out, ctx["protocol_sha256"])
    atomic_write_json(out / "eval_status.json", {
        "mode": "confirmation" if ctx["protocol_sha256"] else "exploratory", "status": ctx["status"],
        "protocol_sha256": ctx["protocol_sha256"], "code_changed_since_freeze": ctx["changed"]})


def evaluate(a, ctx, out):
    claim_folder(out, ctx)
    runs, cfg0, plan, status = ctx["runs"], ctx["cfg0"], ctx["plan"], ctx["status"]
    label = "" if ctx["protocol_sha256"] else " (UNCONFIRMED)"
    # development before confirmation, whatever order the (sorted-key) protocol lists them in
    pops = {p: plan["populations"][p] for p in ("dev", "conf")}
    print(f"evaluating {len(runs)} runs from {a.runs} -> {out}")
    if ctx["absent"]:
        print("absent: " + "; ".join(f"{n} ({why})" for n, why in ctx["absent"]))
    print(f"confirmation rows {pops['conf']['rows'][0]}:{pops['conf']['rows'][1]}: {len(ctx['dups'])} exact duplicates excluded")
    specs = {p: WindowSpec.for_context(cfg0.context, v["seed"], plan["per_stratum"]) for p, v in pops.items()}
    wins = {p: build_windows(ctx["streams"][p], specs[p]) for p in pops}
    conf, rows = score_checkpoints(runs, cfg0, wins, specs, ctx["streams"]["conf"], plan, ctx["tb"], out, a.device, status)
    write_confirmation_evidence(out / "confirmation_evidence.npz", conf, rows, status)
    fp_ok = fingerprints_agree(ctx["checks"], conf, runs)
    atomic_write_json(out / "stream_checks.json", {"status": status, "checks": ctx["checks"], "fingerprints": fp_ok})
    summaries = window_summaries(runs, wins, specs, pops, plan, ctx["dups"], out, status)
    rk = rankings_of(runs, cfg0.context, plan, out, status)
    drawn = [] if a.no_figures else figures(summaries, rk, cfg0.context, out, label)
    report = header(runs, ctx, label) + stream_check_md(ctx["checks"], fp_ok, label)
    report += confirmation_md(conf, runs, ctx["dups"], plan["confirmation_batches"] * cfg0.eval_rows * cfg0.context, label,
                              ctx["checks"]["conf"])
    report += windows_md(summaries, pops, label, not a.no_figures)
    report += ranking_md(rk, plan, cfg0.context, label, ctx["checks"]["dev"], not a.no_figures)
    atomic_write_json(out / "confirmation.json", {
        "status": status, "rows": pops["conf"]["rows"], "duplicates": ctx["dups"],
        "targets": plan["confirmation_batches"] * cfg0.eval_rows * cfg0.context,
        "scores": [{"condition": c, "seed": s, **v} for (c, s), v in conf.items()]})
    atomic_write_text(out / "report.md", "\n".join(report))
    print(for_terminal("\n".join(report)))
    print(f"wrote {out}/report.md, stream_checks.json, window_summary_*.json, confirmation.json, rankings.json, "
          + (f"{len(drawn)} figures ({', '.join(drawn)})" if drawn else "no figures (--no-figures)")
          + " and evidence files")
    if not all(fp_ok.values()):
        bad = [k for k, v in fp_ok.items() if not v]
        print(f"error: the CPU replay's input/target fingerprint differs from the scored stream's ({', '.join(bad)})",
              file=sys.stderr)
        return 1
    return 0


def _done(path, sha, fingerprint=None):
    """A statistics file already written for this checkpoint (and window sample): an interrupted evaluation resumes."""
    import pyarrow.parquet as pq

    if not path.exists():
        return False
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError: a file cut short is scored again
        print(f"note: {path} is unreadable ({str(e).splitlines()[0] if str(e) else type(e).__name__}); scored again")
        return False
    return meta.get(b"checkpoint_sha256", b"").decode() == sha and (
        fingerprint is None or meta.get(b"fingerprint", b"").decode() == fingerprint)


def score_checkpoints(runs, cfg0, wins, specs, conf_stream, plan, tb, out, device, status):
    """Per checkpoint: window statistics of both populations and the confirmation rows. Returns the confirmation
    scores and, by the same (condition, seed) keys, the per-row statistics they are computed from."""
    import pyarrow.parquet as pq

    from console.progress import bar as tqdm
    from training.checkpoint import load_checkpoint
    from training.config import TrainConfig
    from training.trainer import bf16_enabled, build_model, maybe_compile

    conf, rows = {}, {}
    for run_dir, res, ckpt in tqdm(runs, desc="checkpoints"):
        cfg = TrainConfig(**res.config)
        if cfg.context != cfg0.context or cfg.source != cfg0.source:
            raise DataError(f"{run_dir}: runs differ in context or corpus")
        cond, sha = condition_of(cfg.loader), sha256_file(ckpt)
        ac = bf16_enabled(cfg, device)  # the policy train.py scored the run with
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
                    "spec": json.dumps(specs[p].to_dict()), "status": status})
        path = ed / "confirmation_rows.parquet"
        if _done(path, sha):
            t = pq.read_table(path)
            cs = {k: t.column(k).to_numpy() for k in ("nats", "bytes", "count")}
            cs["fingerprint"] = t.schema.metadata[b"fingerprint"].decode()
        else:
            cs = row_statistics(loaded(), conf_stream, tb, plan["confirmation_batches"], cfg.eval_rows, cfg.row_capacity,
                                device, ac, cfg.eval_buffer)
            write_stats(path, cs, {"checkpoint_sha256": sha, "condition": cond, "seed": cfg.seed, "status": status})
        conf[(cond, cfg.seed)] = {**scores(cs), "fingerprint": cs["fingerprint"], "run": run_dir.name}
        rows[(cond, cfg.seed)] = cs
    return conf, rows


def write_confirmation_evidence(path, conf, rows, status):
    """What each confirmation score is a function of (per-row nats, bytes, counted targets), one row of each
    array per run: confirmation_rows.parquet's numbers for the numpy checker, which cannot read parquet."""
    keys = list(conf)
    buf = io.BytesIO()
    np.savez(buf, runs=np.asarray([conf[k]["run"] for k in keys]), conditions=np.asarray([k[0] for k in keys]),
             seeds=np.asarray([k[1] for k in keys], dtype=np.int64),
             nats=np.stack([np.asarray(rows[k]["nats"], dtype=np.float64) for k in keys]),
             bytes=np.stack([np.asarray(rows[k]["bytes"], dtype=np.int64) for k in keys]),
             count=np.stack([np.asarray(rows[k]["count"], dtype=np.int64) for k in keys]), status=np.asarray(status))
    atomic_write_bytes(path, buf.getvalue())


def fingerprints_agree(checks, conf, runs):
    """The replayed streams are the scored ones: confirmation rows of every checkpoint, each run's official rows."""
    return {"conf": all(s["fingerprint"] == checks["conf"]["fingerprint"] for s in conf.values()),
            "dev": all(r[1].fingerprint in (None, checks["dev"]["fingerprint"]) for r in runs)}


def window_summaries(runs, wins, specs, pops, plan, dups, out, status):
    """Section 5.5 comparisons per population, written as JSON and evidence."""
    from eval.compare import compare_windows, write_evidence

    summaries = []
    for p in pops:
        paths = [out / r[0].name / f"windows_{p}.parquet" for r in runs]
        summary, ev = compare_windows(paths, contrast_strata=plan["contrast_strata"], replicates=plan["replicates"],
                                      alpha=plan["alpha"], seed=plan["bootstrap_seed"])
        summary["status"] = status
        summary["per_stratum"] = counts_per_stratum(wins[p], specs[p])
        summary["duplicates_excluded"] = [{"row": r, "duplicate_of": w} for r, w in dups] if p == "conf" else []
        atomic_write_json(out / f"window_summary_{p}.json", summary)
        write_evidence(out / f"window_evidence_{p}.npz", ev, summary)
        summaries.append(summary)
    return summaries


def rankings_of(runs, context, plan, out, status):
    """Section 5.6: the protocol's ranked set (never the folder's contents) on the official-stream rows."""
    import pyarrow.parquet as pq

    decl = plan["ranking"]
    have = {r[0].name: r for r in runs}
    names = [n for n in decl["population"] if n in have]
    missing = [n for n in decl["population"] if n not in have]
    if decl["reference"] not in have or len(names) < 2:
        rk = {"status": status, "declared": decl, "missing": missing, "skipped": True}
        atomic_write_json(out / "rankings.json", rk)
        return rk
    nats, nbytes = [], []
    for n in names:
        t = pq.read_table(have[n][0] / "official_rows.parquet")
        nats.append(t.column("nats").to_numpy())
        nbytes.append(t.column("bytes").to_numpy())
    nats, nbytes = np.stack(nats), np.stack(nbytes)
    pre = prefix_rows(nats.shape[1], context, tuple(decl["prefix_targets"]))
    rk = rankings(nats, nbytes, names, decl["reference"], pre, subsets=plan["ranking_subsets"], seed=plan["ranking_seed"])
    # the prefixes used, in targets (the paper's scaled to this stream's length), beside the paper's own
    rk.update({"status": status, "missing": missing,
               "declared": {**decl, "prefix_targets": [r * context for r in pre],
                            "paper_prefix_targets": decl["prefix_targets"]}})
    atomic_write_json(out / "rankings.json", rk)
    buf = io.BytesIO()
    np.savez(buf, nats=nats, bytes=nbytes, names=np.asarray(names), reference=np.asarray(decl["reference"]),
             prefixes=np.asarray(pre), status=np.asarray(status))
    atomic_write_bytes(out / "ranking_evidence.npz", buf.getvalue())
    return rk


FIGURES = {"contrasts": "contrasts_forest.png", "strata": "begin_tail_deltas.png", "bins": "bin_contributions.png",
           "rankings": "prefix_rankings.png"}


def figures(summaries, rk, context, out, label):
    """Draws the figures; returns the file names written."""
    from eval import figures as fg

    fg.contrasts_forest(summaries, out / FIGURES["contrasts"], label)
    fg.begin_tail_deltas(summaries, out / FIGURES["strata"], label)
    fg.bin_contributions(summaries, out / FIGURES["bins"], label)
    if not rk.get("skipped"):
        fg.prefix_rankings(rk, context, out / FIGURES["rankings"], label)
    return [f for k, f in FIGURES.items() if k != "rankings" or not rk.get("skipped")]


def header(runs, ctx, label):
    out = [f"# Evaluation of {len(runs)} checkpoints{label}", "", f"Status: **{ctx['status']}**.", "",
           "Evaluated: " + ", ".join(r[0].name for r in runs) + ".", ""]
    if ctx["protocol_sha256"] is None:
        out += ["Absent configured runs: " + ("; ".join(f"{n} ({why})" for n, why in ctx["absent"]) or "none") + ".", "",
                "Without a frozen protocol every number below is exploratory and unconfirmed.", ""]
    out += [f"Note: {n}." for n in ctx["notes"]] + ([""] if ctx["notes"] else [])
    return out


def stream_check_md(checks, fp_ok, label):
    out = [f"## Stream checks before scoring (sections 5.4 and 5.6){label}", "",
           "Each evaluation stream replayed on CPU with the audit's packer code before any forward pass.", "",
           "| Stream | Section | Rows | Targets | R | B | Limit | Longest emitted source | Sources over | Holds | "
           "Fingerprint equals the scored stream's |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for p, r in checks.items():
        out.append(f"| {'official development' if p == 'dev' else 'confirmation'} | {r['section']} | {r['rows']:,} | "
                   f"{r['targets']:,} | {r['R']} | {r['buffer']} | {r['max_source_len']} | {r['longest_emitted']} | "
                   f"{r['sources_over']} | {'yes' if r['holds'] else 'NO'} | {'yes' if fp_ok[p] else 'NO'} |")
    return out + [""]


def confirmation_md(conf, runs, dups, targets, label, check):
    """Section 5.4: development (each run's official score) beside the confirmation score, deltas vs same-seed baseline."""
    dev = {(condition_of(r[1].config["loader"]), r[1].config["seed"]): r[1].bpb for r in runs}
    out = [f"## 5.4 Untouched original-style confirmation{label}", "",
           f"{targets:,} confirmation targets; {len(dups)} exact duplicates excluded. As measured before scoring, this "
           f"stream emits no source whose original length exceeds R = {check['R']} (longest: {check['longest_emitted']}). "
           "Development is each run's official score (section 5.3); deltas are against the same-seed baseline.", "",
           "| Condition | Seed | Development BPB | Development delta | Confirmation BPB | Confirmation delta | CE | Perplexity |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def delta(table, key):
        base = table.get(("baseline", key[1]))
        return f"{table[key] - base:+.8f}" if base is not None and table[key] is not None else "n/a (no baseline)"

    cb = {k: v["bpb"] for k, v in conf.items()}
    for key, s in sorted(conf.items(), key=lambda kv: (kv[0][1], kv[0][0] != "baseline", kv[0][0])):
        d = f"{dev[key]:.8f}" if dev.get(key) is not None else "n/a"
        out.append(f"| {key[0]} | {key[1]} | {d} | {delta(dev, key) if dev.get(key) is not None else 'n/a'} | "
                   f"{s['bpb']:.8f} | {delta(cb, key)} | {s['ce']:.8f} | {s['perplexity']:.5f} |")
    fps = {s["fingerprint"] for s in conf.values()}
    out += ["", f"Input/target fingerprint: {'one for all checkpoints: ' + next(iter(fps)) if len(fps) == 1 else 'DIFFERS'}", ""]
    return out


def windows_md(summaries, pops, label, linked=True):
    from eval.compare import window_table_md

    out = [f"## 5.5 Conditional source windows{label}", "",
           f"![declared contrasts]({FIGURES['contrasts']})", "",
           "Declared contrasts (tail minus beginning) with their Bonferroni intervals, both populations: an interval "
           "left of zero means the intervention helped tails more than beginnings.", "",
           f"![every stratum]({FIGURES['strata']})", "",
           "Beginning and tail deltas for every stratum, condition and seed: the paper's pattern is beginnings right "
           "of zero (worse) and tails left of it (better); black intervals are the declared, adjusted ones.", "",
           f"![position bins]({FIGURES['bins']})", "",
           "Tail position-bin contributions side by side on one scale (the red marker is their sum, the window "
           "delta; * marks a declared cell): how much of a tail's change sits after the first positions.", ""] if linked else [
           f"## 5.5 Conditional source windows{label}", "", "(figures skipped: --no-figures)", ""]
    for s in summaries:
        p = s["population"]
        name = "Development" if p == "dev" else "Confirmation"
        out += [f"### 5.5 {name}: rows {pops[p]['rows'][0]}:{pops[p]['rows'][1]}, seed {pops[p]['seed']}{label}", "",
                "| stratum | sources | tail windows |", "|---|---:|---:|"]
        out += [f"| {c['stratum']} | {c['sources']} | {c['tail_windows']} |" for c in s["per_stratum"]]
        out += ["", window_table_md(s, label)]
    return out


def ranking_md(rk, plan, context, label, check, linked=True):
    out = [f"## 5.6 Rankings on the official development stream at prefixes{label}", "",
           f"In its {check['targets']:,} targets the official development stream emits no source longer than "
           f"{check['max_source_len']} (the paper's 4096 at context 2048, scaled to {context}; longest emitted: "
           f"{check['longest_emitted']}), so its score cannot contain the section 5.5 effects on longer sources.", "",
           "Ranked set (declared " + ("by the protocol" if "(UNCONFIRMED)" not in label else "by the default rule, "
                                      "unconfirmed") + f"): {', '.join(plan['ranking']['population'])}; reference "
           f"{plan['ranking']['reference']}.", ""]
    if rk.get("missing"):
        out += [f"Not ranked (absent): {', '.join(rk['missing'])}.", ""]
    if rk.get("skipped"):
        return out + ["No ranking: the reference or a second member of the ranked set is absent.", ""]
    if linked:
        out += [f"![prefix rankings]({FIGURES['rankings']})", "",
                "BPB delta against prefix size with subset intervals: a prefix whose point leaves its interval, or "
                "whose sign differs from the full-stream star, would rank the methods differently.", ""]
    return out + [rankings_md(rk, context)]


if __name__ == "__main__":
    sys.exit(main())
