"""What `python -m audit` does with its parsed arguments: read the stream, fix the budget,
audit each packer (audit/pipeline.py), write the folder (report: audit/report.py), swap it in.
"""
import contextlib
import functools
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from audit import plots
from audit.adapters import SPECS, installed, user_spec
from audit.compare import COMPARISON_FILE, comparison
from audit.fate_table import DocumentIndex
from audit.lengths_file import prepared_labels, read_stream, write_stream_lengths
from audit.libraries.args import check_datasets, loader_settings
from audit.loader_presets import apply_pipeline, describe
from audit.pipeline import StreamInput, audit_packer, check_packers, horizon, permutation_delays, stream_pass_bounds
from audit.regime import PAPER_PASS_BOUNDS, PAPER_STARTUP_RANGE, indicators_from, tiny_training_column
from audit.replay import PAPER_TARGETS, TARGETS_PER_UPDATE, rows_for_targets
from audit.report import console_summary, report_md
from audit.synthetic import paper_like_lengths
from audit.topology import audit_topology, check_topology, parse_split, topology_ok
from console.progress import bar
from corpus.atomic import atomic_write_json, atomic_write_text
from corpus.layout import Layout, default_data_dir
from corpus.pretokenize import TokenShard
from corpus.runlock import FolderLocked, lock_file
from errors import DataError
from fanout import open_engine
from loaders.core import PACKERS

OFFICIAL_TARGETS = 160 * 64 * 2048  # 20,971,520
COST_NOTICE_S = 600  # an audit expected to take longer says so first
REPLAY_DOCS_PER_S = 700_000  # the replay's rate at 10^8 documents (README's scale table, 2026-12-06)
TRACE_DOCS_PER_S = 100_000  # concatenate-and-chunk's trace at 10^7 (a library packer is often slower)
PAPER_TOKEN_FRACTION = PAPER_TARGETS / 631_241_817  # the paper's budget as a share of its corpus


def load_stream(args) -> StreamInput:
    """The stream the audit reads, where each document comes from, and the passes it gives (--passes)."""
    stream = _read_stream(args)
    stream.passes = args.passes
    stream.loader_args = getattr(args, "loader_args", None) or {}
    check_lengths(stream, args.max_length)
    return stream


def _read_stream(args) -> StreamInput:
    if args.corpus:
        return corpus_stream(args)
    if args.lengths:
        L, refills, labels = read_stream(args.lengths, args.column, args.label_column)
        if refills is None:
            refills = np.append(np.arange(0, len(L), args.refill_docs), len(L))
        return StreamInput(f"lengths:{Path(args.lengths).name}", "lengths", L, refills, labels,
                           DocumentIndex.one_file(Path(args.lengths).name, L, labels))
    if args.synthetic:
        L = paper_like_lengths()
        return StreamInput("synthetic-paper-census", "synthetic", L, np.append(np.arange(0, len(L), 128), len(L)),
                           index=DocumentIndex.one_file("synthetic-paper-census", L))

    lay = Layout(args.data_dir or default_data_dir(), args.source)
    names = lay.shard_names(args.split)
    lengths, refills = [], [0]
    for n in names:  # lengths only: the audit never touches tokens
        sh = TokenShard(lay.tokens, n)
        lengths.append(sh.lengths)
        refills.extend((refills[-1] + sh.refills[1:]).tolist())
    labels = prepared_labels(lay, names, [len(x) for x in lengths]) if args.source != "climbmix" else None
    L = np.concatenate(lengths)
    index = DocumentIndex([f"{n}.parquet" for n in names],
                          np.repeat(np.arange(len(names), dtype=np.int32), [len(x) for x in lengths]),
                          np.concatenate([np.arange(len(x), dtype=np.int64) for x in lengths]), L, labels)
    return StreamInput(f"{args.source}:{args.split}", args.source, L, np.asarray(refills), labels, index)


def corpus_stream(args) -> StreamInput:
    """--corpus: the corpus read where it lives (corpus/readers, on the engine asked for), its lengths cached."""
    # late: the readers load tokenizers, datasets and zstandard only when a corpus is read
    from fanout.corpus_data import corpus_lengths

    res = corpus_lengths(args.corpus, args.tokenizer, engine=args.engine, workers=args.workers,
                         ray_address=args.ray_address, ray_verbose=getattr(args, "verbose", False), format=args.format,
                         column=args.column, label=args.label_column,
                         bos=args.bos, bos_id=args.bos_id, separator=args.separator, token_dtype=args.token_dtype,
                         cache_dir=args.cache_dir or f"{Path(args.out)}.lengths")
    print(res.message)
    empty = np.flatnonzero(res.lengths < 1)
    if len(empty):
        i = int(empty[0])
        raise DataError(f"{res.files[res.doc_file[i]]} row {res.doc_row[i]:,}: an empty document ({len(empty):,} in "
                        "all) has no token to pack; count a BOS with --bos add, or leave them out of the corpus")
    L = res.lengths.astype(np.int64)
    refills = np.append(np.arange(0, len(L), args.refill_docs), len(L))
    first = Path(res.files[0]).name + (f" and {len(res.files) - 1} more" if len(res.files) > 1 else "")
    stream = StreamInput(f"corpus:{first}", "corpus", L, refills, res.labels,
                         DocumentIndex(list(res.files), res.doc_file, res.doc_row, L, res.labels))
    stream.provenance = {k: v for k, v in res.provenance.items() if k != "units"}
    stream.provenance["cached"] = bool(res.cached)
    return stream


def check_lengths(stream, bound):
    """Every length at most `bound` (--max-length): one length past it (a corrupt file, a token count read as a
    byte count) would otherwise start an audit of millions of rows."""
    i = int(np.argmax(stream.lengths))
    if stream.lengths[i] > bound:
        where = (f"{stream.index.files[stream.index.file_of[i]]} row {stream.index.row_of[i]:,}"
                 if stream.index is not None else f"document {i:,}")
        raise DataError(f"{where}: a document of {int(stream.lengths[i]):,} tokens, above --max-length {bound:,}; "
                        "check the input, or raise --max-length if it is real")


def announce_cost(stream, packers, rows, R):
    """An audit expected to take longer than COST_NOTICE_S says so before it starts (Ctrl-C ends it, writing
    nothing). The rates were measured (README, "Audit your own packer"); a machine may be a few times slower."""
    docs = min(rows * (R - 1) / max(stream.tokens / stream.n, 1), stream.n * (stream.passes or float("inf")))
    seconds = sum(docs / (REPLAY_DOCS_PER_S if p in PACKERS else TRACE_DOCS_PER_S) for p in packers)
    if seconds > COST_NOTICE_S:
        print(f"note: this audit will take about {seconds / 60:,.0f} minutes ({docs:,.0f} documents through "
              f"{len(packers)} packer{'s' * (len(packers) > 1)}); Ctrl-C stops it and writes nothing")
    return seconds


def budget(args, stream, R):
    if args.updates is not None:
        return args.updates * TARGETS_PER_UPDATE, f"{args.updates} updates"
    if args.targets is not None:
        return args.targets, "--targets"
    if args.split == "val" and args.source == "climbmix" and not args.lengths:
        return OFFICIAL_TARGETS, "the official metric's 160 batches of 64 rows"
    if args.synthetic or (args.source == "climbmix" and not args.lengths):
        return PAPER_TARGETS, "the paper's 953 updates"
    # scale: the same share of the corpus's tokens as the paper's budget, whole rows: one pass or less
    t = int(PAPER_TOKEN_FRACTION * stream.tokens) // (R - 1) * (R - 1)
    where = {"lengths": "this length file", "corpus": "this corpus", "stdlib": "the offline corpus",
             "parquet": "this prepared parquet corpus"}.get(stream.kind, "this corpus")
    return t, (f"scaled to {where}: the paper's share ({PAPER_TOKEN_FRACTION:.2%}) of its {stream.tokens:,} tokens, "
               f"in whole rows: {t / stream.tokens:.2%}")


def check_args(args):
    """Every bad value refused in one line before anything is read or written."""
    args.preset = apply_pipeline(args)
    for flag, v, lo in (("--row-capacity", args.row_capacity, 2), ("--buffer", args.buffer, 1),
                        ("--targets", args.targets, 1), ("--updates", args.updates, 1),
                        ("--refill-docs", args.refill_docs, 1), ("--permutations", args.permutations, 0),
                        ("--ranks", args.ranks, 1), ("--loader-workers", args.loader_workers, 1),
                        ("--workers", args.workers, 1)):
        if v is not None and v < lo:
            what = {2: "R must be at least 2 (one input and one target)", 1: "must be positive",
                    0: "must be 0 or more"}[lo] if flag != "--buffer" else "B must be at least 1"
            raise DataError(f"{flag} {v}: {what}")
    if args.passes is not None and args.passes < 1:
        raise DataError(f"--passes {args.passes}: must be positive (leave it out for a stream that wraps)")
    if args.max_length < 1:
        raise DataError(f"--max-length {args.max_length}: must be positive")
    corpus_only = [f for f, v in (("--tokenizer", args.tokenizer), ("--bos-id", args.bos_id), ("--format", args.format),
                                  ("--separator", args.separator), ("--token-dtype", args.token_dtype),
                                  ("--cache-dir", args.cache_dir), ("--bos", args.bos != "auto" or None))
                   if v is not None]
    if corpus_only and not args.corpus:
        raise DataError(f"{corpus_only[0]} applies to --corpus (your corpus where it lives) only")
    if (args.lengths or args.corpus) and args.split != "train":
        raise DataError("--split applies to a prepared corpus, not to a --lengths file")
    if args.column is not None and not (args.corpus or (args.lengths or "").lower().endswith(".parquet")):
        raise DataError("--column applies to a --lengths .parquet file or to --corpus only")
    try:
        thr = [int(t) for t in args.thresholds.split(",") if t.strip()]
    except ValueError:
        raise DataError(f"--thresholds {args.thresholds!r}: expected comma-separated integers") from None
    if any(t < 1 for t in thr):
        raise DataError(f"--thresholds {args.thresholds!r}: thresholds must be positive")
    args.group = parse_split(args.split_by)
    user = user_spec(args.trace, _trace_args(args.trace_arg)) if args.trace else None
    names = {"all": list(PACKERS), "every": list(PACKERS) + [n for n, s in SPECS.items() if installed(s)]}.get(
        args.packers, [p.strip() for p in args.packers.split(",") if p.strip()])
    if user is not None and user.name not in names:
        names.append(user.name)
    args.loader_args = loader_settings(args, names)
    return check_packers(names, user), thr, user


def _trace_args(pairs):
    out = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise DataError(f"--trace-arg {kv!r}: expected KEY=VALUE")
        for cast in (int, float):
            try:
                v = cast(v)
                break
            except ValueError:
                pass
        out[k] = v
    return out


def runs_permutations(args, packers) -> bool:
    """The arrival-order permutations run (a fan-out) when asked for and the paper's own packer is audited."""
    return bool(args.permutations) and "original" in packers


def runs_worker_streams(args) -> bool:
    """The topology's worker streams run (a fan-out) when there is more than one."""
    return args.streams_ranks * args.streams_workers > 1


def compute(args, stream, packers, thresholds, user, work, engine=None):
    """Every packer's summary, the bounds, the permutations, the comparison, the regime: the summary."""
    R, B = args.row_capacity, args.buffer
    targets, reason = budget(args, stream, R)
    rows = rows_for_targets(targets, R)
    if rows < 1:
        raise DataError(f"budget of {targets} targets is less than one row of {R - 1}")
    passes, sentence = horizon(targets, stream)
    print(f"audit of {stream.name}: {stream.n:,} documents per pass -> {args.out}")
    print(f"budget: {targets:,} targets = {rows:,} rows ({reason})")
    print(sentence if passes <= 1 else f"note: {sentence}")
    announce_cost(stream, packers, rows, R)
    t0 = time.time()
    per = {}
    for p in bar(packers, desc="packers", unit="packer"):
        per[p] = audit_packer(stream, p, rows, R, B, work, args.csv, user, fates=not args.no_fates)
    started = max((s.get("passes_started") or 1 for s in per.values() if "refused" not in s), default=1)
    if started > 1 and passes <= 1:
        passes, sentence = horizon(targets, stream, started)
        print(f"note: {sentence}")
    summary = {"stream": stream.name, "source": stream.kind, "targets": targets, "rows": rows, "budget_reason": reason,
               "row_capacity": R, "buffer": B, "horizon": {"passes": passes, "sentence": sentence},
               "labelled": stream.labels is not None, "csv": bool(args.csv), "packers": per,
               "corpus": stream.provenance, "passes_limit": stream.passes,
               "packer_seconds": {p: s.pop("seconds", None) for p, s in per.items()}}
    if runs_permutations(args, per):
        summary["permutations"] = permutation_delays(stream, R, B, rows, args.permutations, bar, engine)
    summary["pass_bounds"] = stream_pass_bounds(stream, thresholds, R, B)
    summary["left_out"] = getattr(args, "left_out", {})  # packers the caller chose not to run, and why
    summary["comparison"] = comparison(summary)
    if "original" in per:
        summary["regime"] = regime(args, stream, R, B, targets, per)
    if args.preset:
        summary["pipeline"] = describe(args, args.preset)
    if runs_worker_streams(args):
        summary["topology"] = audit_topology(stream, packers, rows, R, B, work, args.streams_ranks,
                                             args.streams_workers, args.group, args.refill_docs, user, engine)
    summary["seconds"] = round(time.time() - t0, 2)
    return summary


def regime(args, stream, R, B, targets, per):
    """Indicators of this audit's setting and, for the offline corpus, the tiny training preset."""
    cols = {"this audit": indicators_from(stream, R, B, targets, per["original"], per.get("segment_first"))}
    if stream.kind == "stdlib" and stream.name.endswith(":train"):
        cols["tiny training"] = tiny_training_column(args.data_dir)
    return {"columns": cols}


def write_figures(summary, work):
    per = [s for s in summary["packers"].values() if "refused" not in s]
    R, figs = summary["row_capacity"], []

    def fig(name, draw, *a):
        draw(*a, work / name)
        figs.append(name)

    if per:
        fig("retention_by_stratum.png", plots.retention_by_stratum, per)
        fig("sources_started.png", plots.sources_started, per, R)
        main = next((s for s in per if s["packer"] == "original"), per[0])
        if main["plot"]["buffer_curve"]:
            fig("buffer_mass.png", plots.buffer_mass, main)
        fig("length_histogram.png", plots.length_histogram, main, R)
        if len(main["by_label"]) > 1:  # one label (or none given): nothing to compare
            fig("label_coverage.png", plots.label_coverage, per)
        fig("position_exposure.png", plots.position_exposure, per)
        fig("comparison.png", plots.comparison, summary["comparison"])
    if summary.get("permutations"):
        fig("startup_delay.png", plots.startup_delay, summary["permutations"], PAPER_STARTUP_RANGE)
    fig("pass_bounds.png", plots.pass_bounds, summary["pass_bounds"], PAPER_PASS_BOUNDS, summary["buffer"])
    return figs


def write_folder(summary, stream, work, figures=True):
    write_stream_lengths(stream, work / "stream_lengths.txt")
    summary["figures"] = write_figures(summary, work) if figures else []
    for s in summary["packers"].values():
        s.pop("plot", None)  # bounded plot data: drawn, not kept in summary.json
    atomic_write_json(work / COMPARISON_FILE, summary["comparison"])
    if summary.get("regime"):
        atomic_write_json(work / "regime.json", summary["regime"])
    summary["folder_bytes"] = 0
    atomic_write_json(work / "summary.json", summary)
    atomic_write_text(work / "report.md", report_md(summary))
    # the size stated in the report is the folder's, report and summary included (two passes: they hold it)
    for _ in range(2):
        summary["folder_bytes"] = sum(p.stat().st_size for p in work.iterdir() if p.is_file())
        atomic_write_json(work / "summary.json", summary)
        atomic_write_text(work / "report.md", report_md(summary))


def interrupts(fn):
    """fn with SIGTERM and SIGHUP raising KeyboardInterrupt in it, as Ctrl-C does: the finally blocks then remove
    the temporary folder and the lock (the default action would end the process and leave both behind)."""
    @functools.wraps(fn)
    def wrapped(*a, **kw):
        if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
            return fn(*a, **kw)

        def stop(signum, frame):
            raise KeyboardInterrupt(signal.Signals(signum).name)

        saved = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            return fn(*a, **kw)
        finally:
            for s, h in saved.items():
                signal.signal(s, h if h is not None else signal.SIG_DFL)
    return wrapped


@interrupts
def run_audit(args) -> int:
    out = Path(args.out)
    try:
        packers, thresholds, user = check_args(args)
        stream = load_stream(args)
        check_datasets(stream, packers)
        check_topology(stream.n, args.streams_ranks * args.streams_workers, args.group)
        if out.exists() and not out.is_dir():
            raise DataError(f"--out {out}: is a file, not a folder")
        out.parent.mkdir(parents=True, exist_ok=True)
        stack = contextlib.ExitStack()
        stack.enter_context(lock_file(out.parent / f".{out.name}.lock", f"the audit output {out}"))
    except OSError as e:
        raise DataError(f"--out {out}: cannot be made or locked ({e.strerror or type(e).__name__})") from None
    except (FolderLocked, ValueError) as e:
        raise DataError(str(e)) from None
    # everything is written into a fresh sibling folder and swapped in at the end, so a failed
    # audit leaves the previous complete output untouched, never a mix of old and new files
    try:
        # the engine of the worker streams and the permutations first (a Ray started or joined): a bad --engine
        # setup is one line, nothing written. A --trace packer is the user's object, made to be called, not pickled:
        # with one, the local engine keeps every task in this process
        engine, workers = None, 1 if user is not None else (args.workers or 1)
        if runs_worker_streams(args) or runs_permutations(args, packers):
            engine = stack.enter_context(open_engine(getattr(args, "engine", "local"), workers,
                                                     getattr(args, "ray_address", None), getattr(args, "verbose", False)))
            engine.probe()  # before any compute: on Ray, every node at the driver's checkout (the lengths travel)
        for stale in out.parent.glob(f".{out.name}.new-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a killed audit's partial output (we hold the lock)
        # absolute: a worker stream's task on a Ray node writes its scratch there when it sees the folder
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=os.path.abspath(out.parent)))
        work.chmod(0o755)  # mkdtemp makes 0700; the output folder gets the usual permissions
        summary = compute(args, stream, packers, thresholds, user, work, engine)
        write_folder(summary, stream, work, not args.no_figures)
        for tmp in work.glob(".*-work"):
            shutil.rmtree(tmp, ignore_errors=True)
        old = out.parent / f".{out.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            os.replace(out, old)
        os.replace(work, out)
        shutil.rmtree(old, ignore_errors=True)
    except ValueError as e:
        raise DataError(str(e)) from None
    finally:
        if "work" in locals() and work.exists():
            shutil.rmtree(work, ignore_errors=True)
        stack.close()  # releases the lock
    print(console_summary(summary))
    print(f"wrote {out}: summary.json, comparison.json, report.md, events_*.parquet, {len(summary['figures'])} figures, "
          f"{summary['folder_bytes'] / 1e6:,.1f} MB ({summary['seconds']}s)")
    ok = [s for s in summary["packers"].values() if "refused" not in s]
    bad = [s for s in ok if not s["partition_holds"] or s["protected"]["proposition_held"] is False]
    return 1 if bad or not topology_ok(summary.get("topology")) else 0
