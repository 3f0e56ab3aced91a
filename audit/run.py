"""What `python -m audit` does with its plan (audit/plan.py): read the stream, fix the budget,
audit each packer (audit/pipeline.py), write the folder (report: audit/report.py), swap it in.
"""
import contextlib
import functools
import math
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from audit.compare import comparison
from audit.fate_table import DocumentIndex
from audit.lengths_file import prepared_labels, read_stream, write_stream_lengths
from audit.libraries.args import check_datasets
from audit.loader_presets import describe
from audit.out_folder import check_out, clear_unfinished, new_folder, replace_whole
from audit.pipeline import StreamInput, audit_packer, horizon, permutation_delays, stream_pass_bounds
from audit.regime import PAPER_PASS_BOUNDS, PAPER_STARTUP_RANGE, indicators_from, tiny_training_column
from audit.replay import PAPER_TARGETS, TARGETS_PER_UPDATE, rows_for_targets
from audit.report import console_summary, overdrawn, report_md
from audit.synthetic import paper_like_lengths
from audit.topology import (audit_topology, check_rows, check_topology, file_count, file_of, share_sizes, split_note,
                            topology_ok)
from console.progress import bar
from console.sizes import size
from corpus.atomic import atomic_write_json, atomic_write_text
from corpus.layout import Layout, default_data_dir
from corpus.pretokenize import TokenShard
from corpus.runlock import FolderLocked, lock_file
from errors import DataError
from fanout import open_engine
from loaders.core import PACKERS
from records.audit_comparison import Comparison
from records.audit_summary import AuditSummary

OFFICIAL_TARGETS = 160 * 64 * 2048  # 20,971,520
COST_NOTICE_S = 600  # an audit expected to take longer says so first
REPLAY_DOCS_PER_S = 700_000  # the replay's rate at 10^8 documents (README's scale table, 2026-12-06)
TRACE_DOCS_PER_S = 100_000  # concatenate-and-chunk's trace at 10^7 (a library packer is often slower)
# a replay's memory for each place of its buffer, and for each document that arrives in it, fates included
# (3,000 documents a pass, --buffer 10^7 with --passes 1 and without: 3.1 GB and 6.2 GB more than at 10^3, 2026-12-07)
SLOT_BYTES, ARRIVAL_BYTES = 310, 320
PAPER_TOKEN_FRACTION = PAPER_TARGETS / 631_241_817  # the paper's budget as a share of its corpus


def load_stream(plan) -> StreamInput:
    """The stream the audit reads, where each document comes from, and the passes it gives (--passes)."""
    stream = _read_stream(plan.stream, plan.engine)
    stream.passes = plan.stream.passes
    stream.loader_args = plan.loader_args
    # a --lengths file's documents are its entries, counted from 1 as its other errors count them
    flag = f"--lengths {plan.stream.lengths}" if stream.kind == "lengths" else None
    check_lengths(stream, plan.stream.max_length, flag)
    return stream


def _read_stream(choice, engine) -> StreamInput:
    if choice.kind == "corpus":
        return corpus_stream(choice.corpus, choice.refill_docs, engine)
    if choice.kind == "lengths":
        L, refills, labels = read_stream(choice.lengths, choice.column, choice.label_column)
        if refills is None:
            refills = np.append(np.arange(0, len(L), choice.refill_docs), len(L))
        return StreamInput(f"lengths:{Path(choice.lengths).name}", "lengths", L, refills, labels,
                           DocumentIndex.one_file(Path(choice.lengths).name, L, labels))
    if choice.kind == "synthetic":
        L = paper_like_lengths()
        return StreamInput("synthetic-paper-census", "synthetic", L, np.append(np.arange(0, len(L), 128), len(L)),
                           index=DocumentIndex.one_file("synthetic-paper-census", L))

    lay = Layout(choice.data_dir or default_data_dir(), choice.source)
    names = lay.shard_names(choice.split)
    lengths, refills = [], [0]
    for n in names:  # lengths only: the audit never touches tokens
        sh = TokenShard(lay.tokens, n)
        lengths.append(sh.lengths)
        refills.extend((refills[-1] + sh.refills[1:]).tolist())
    labels = prepared_labels(lay, names, [len(x) for x in lengths]) if choice.source != "climbmix" else None
    L = np.concatenate(lengths)
    index = DocumentIndex([f"{n}.parquet" for n in names],
                          np.repeat(np.arange(len(names), dtype=np.int32), [len(x) for x in lengths]),
                          np.concatenate([np.arange(len(x), dtype=np.int64) for x in lengths]), L, labels)
    return StreamInput(f"{choice.source}:{choice.split}", choice.source, L, np.asarray(refills), labels, index)


def corpus_stream(c, refill_docs, engine) -> StreamInput:
    """--corpus: the corpus read where it lives (corpus/readers, on the engine asked for), its lengths cached.
    c: the plan's CorpusReading; engine: its EngineChoice."""
    # late: the readers load tokenizers, datasets and zstandard only when a corpus is read
    from fanout.corpus_data import corpus_lengths

    res = corpus_lengths(list(c.paths), c.tokenizer, engine=engine.name, workers=engine.workers,
                         ray_address=engine.ray_address, ray_verbose=engine.verbose, format=c.format,
                         column=c.column, label=c.label_column, bos=c.bos, bos_id=c.bos_id, separator=c.separator,
                         token_dtype=c.token_dtype, cache_dir=c.cache_dir)
    print(res.message)
    empty = np.flatnonzero(res.lengths < 1)
    if len(empty):
        i = int(empty[0])
        raise DataError(f"{res.files[res.doc_file[i]]} row {res.doc_row[i]:,}: an empty document ({len(empty):,} in "
                        "all) has no token to pack; count a BOS with --bos add, or leave them out of the corpus")
    L = res.lengths.astype(np.int64)
    refills = np.append(np.arange(0, len(L), refill_docs), len(L))
    first = Path(res.files[0]).name + (f" and {len(res.files) - 1} more" if len(res.files) > 1 else "")
    stream = StreamInput(f"corpus:{first}", "corpus", L, refills, res.labels,
                         DocumentIndex(list(res.files), res.doc_file, res.doc_row, L, res.labels))
    stream.provenance = {k: v for k, v in res.provenance.items() if k != "units"}
    stream.provenance["cached"] = bool(res.cached)
    return stream


def check_lengths(stream, bound, lengths_flag=None):
    """Every length at most `bound` (--max-length): one length past it (a corrupt file, a token count read as a
    byte count) would otherwise start an audit of millions of rows. lengths_flag: '--lengths PATH', whose entries
    are named as its reader names them (from 1), not by the index's row (from 0)."""
    i = int(np.argmax(stream.lengths))
    if stream.lengths[i] > bound:
        where = (f"{lengths_flag}: entry {i + 1:,}" if lengths_flag else
                 f"{stream.index.files[stream.index.file_of[i]]} row {stream.index.row_of[i]:,}"
                 if stream.index is not None else f"document {i:,}")
        raise DataError(f"{where}: a document of {int(stream.lengths[i]):,} tokens, above --max-length {bound:,}; "
                        "check the input, or raise --max-length if it is real")


def check_buffer(plan, stream, flag="--buffer", smaller="a smaller --buffer"):
    """Before anything is written: the memory the paper's packers' buffers take, refused in one line where the machine
    cannot hold it, and said where the buffer holds more documents than a pass of its stream (the smallest worker
    stream's share under a topology). A replay holds SLOT_BYTES for each of the B places of its buffer, whatever
    arrives, and ARRIVAL_BYTES for each document that arrives in it; the local engine runs up to --workers replays
    at once (one per task: a permutation, or a packer's worker stream). On Ray each such task asks its node for a
    replay's memory (replay_bytes), and check_node_memory checks the nodes. flag names the buffer in the lines, smaller
    is the advice (the sweep's: its largest buffer, smaller buffers in --sweep)."""
    paper = [p for p in plan.packers if p in PACKERS]
    if not paper:
        return
    B, streams = plan.buffer, plan.topology.worker_streams if plan.runs_worker_streams else 1
    share = min(share_sizes(stream.n, streams, plan.topology.split, file_of(stream), file_count(stream)))
    given = share * stream.passes if stream.passes else None  # all the smallest stream gives, --passes ending it
    arrivals = min(B, given) if given else B  # the fill: B documents, or all the stream gives
    tasks = max(plan.permutations if plan.runs_permutations else 0, len(paper) * streams if streams > 1 else 0)
    local = plan.engine.name == "local" and plan.user is None  # a --trace packer keeps every task in this process
    at_once = max(1, min(plan.engine.workers or 1, tasks)) if local else 1
    need = (B * SLOT_BYTES + arrivals * ARRIVAL_BYTES) * at_once
    where = "the stream" if streams == 1 else f"the smallest of the {streams} worker streams"
    total = physical_memory()
    if total and need > total:
        raise DataError(f"{flag} {B:,} needs about {size(need)} of memory"
                        f"{f' ({at_once} replays at once)' if at_once > 1 else ''}, more than this machine's "
                        f"{size(total)}; give {smaller}")
    if B <= share:
        return
    if given and B > given:
        print(f"note: {flag} {B:,} holds more documents than {where} gives in its {stream.passes:,} "
              f"pass{'es' * (stream.passes > 1)} (--passes): {given:,}; the paper's packers never fill it and make "
              f"no row; about {size(need)} of memory")
    else:
        print(f"note: {flag} {B:,} holds more documents than a pass of {where} ({share:,}): the paper's packers "
              f"take in up to {arrivals:,} arrivals, from {math.ceil(arrivals / share):,} passes, before their first "
              f"row; about {size(need)} of memory")


def replay_bytes(B, stream):
    """The most memory one replay of the paper's packers holds on this stream: its B places, and up to B arrivals
    (fewer where --passes ends the stream first). What a permutation's or a worker stream's task asks of a Ray node."""
    given = stream.n * stream.passes if stream.passes else B
    return B * SLOT_BYTES + min(B, given) * ARRIVAL_BYTES


def check_node_memory(plan, stream, engine):
    """On Ray, before any compute: a replay that no node's memory holds, refused in one line (Ray would wait for such
    a node forever). This machine's memory is check_buffer's."""
    if engine is None or engine.name != "ray" or not any(p in PACKERS for p in plan.packers):
        return
    need, most = replay_bytes(plan.buffer, stream), engine.most_memory()
    if need > most:
        raise DataError(f"--buffer {plan.buffer:,} needs about {size(need)} of memory a replay, more than any node of "
                        f"{engine.cluster} has for Ray's tasks (at most {size(most)}, a node's `memory` resource); give "
                        "a smaller --buffer, or nodes with more memory")


def announce_cost(stream, packers, rows, R, B):
    """An audit expected to take longer than COST_NOTICE_S says so before it starts (Ctrl-C ends it, writing
    nothing). The rates were measured (README, "Audit your own packer"); a machine may be a few times slower.
    The paper's packers fill their buffer (up to B documents) before their first row, on top of what the budget
    takes."""
    most = stream.n * (stream.passes or float("inf"))  # the arrivals the stream can give at all
    docs = min(rows * (R - 1) / max(stream.tokens / stream.n, 1), most)
    filled = min(docs + B, most)
    seconds = sum(filled / REPLAY_DOCS_PER_S if p in PACKERS else docs / TRACE_DOCS_PER_S for p in packers)
    if seconds > COST_NOTICE_S:
        print(f"note: this audit will take about {seconds / 60:,.0f} minutes ({filled:,.0f} documents through "
              f"{len(packers)} packer{'s' * (len(packers) > 1)}); Ctrl-C stops it and writes nothing")
    return seconds


def physical_memory():
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def budget(plan, stream, R):
    """(targets, why): --updates or --targets as given, else the paper's or the official metric's budget where the
    stream is theirs, else scaled to the stream."""
    if plan.updates is not None:
        return plan.updates * TARGETS_PER_UPDATE, f"{plan.updates} updates"
    if plan.targets is not None:
        return plan.targets, "--targets"
    if plan.stream.split == "val" and plan.stream.prepared == "climbmix":
        return OFFICIAL_TARGETS, "the official metric's 160 batches of 64 rows"
    if plan.stream.kind == "synthetic" or plan.stream.prepared == "climbmix":
        return PAPER_TARGETS, "the paper's 953 updates"
    # scale: the same share of the corpus's tokens as the paper's budget, whole rows: one pass or less
    t = int(PAPER_TOKEN_FRACTION * stream.tokens) // (R - 1) * (R - 1)
    where = {"lengths": "this length file", "corpus": "this corpus", "stdlib": "the offline corpus",
             "parquet": "this prepared parquet corpus"}.get(stream.kind, "this corpus")
    if t < R - 1:
        raise DataError(no_whole_row(stream, R, where))
    return t, (f"scaled to {where}: the paper's share ({PAPER_TOKEN_FRACTION:.2%}) of its {stream.tokens:,} tokens, "
               f"in whole rows: {t / stream.tokens:.2%}")


def no_whole_row(stream, R, where) -> str:
    """The scaled budget's line where the stream's share is less than one row: what to give instead."""
    share = int(PAPER_TOKEN_FRACTION * stream.tokens)  # the most targets a row can hold for the budget to keep one
    fixes = [f"--targets {R - 1} (the stream wraps to reach it)"] if stream.passes is None else []
    if share >= 1:  # R >= 2: a row needs a target
        fixes.append(f"a --row-capacity of {share + 1} or less")
    fixes.append("a corpus with more tokens")
    fixes[-1] = ("or " if len(fixes) > 1 else "") + fixes[-1]
    return (f"budget of 0 targets is less than one row of {R - 1:,}: the paper's share ({PAPER_TOKEN_FRACTION:.2%}) "
            f"of {where}'s {stream.tokens:,} token{'s' * (stream.tokens != 1)}; give "
            f"{(', ' if len(fixes) > 2 else ' ').join(fixes)}")


def compute(plan, stream, work, engine=None):
    """Every packer's summary, the bounds, the permutations, the comparison, the regime: the summary."""
    R, B, packers, user = plan.row_capacity, plan.buffer, plan.packers, plan.user
    targets, reason = budget(plan, stream, R)
    rows = rows_for_targets(targets, R)
    if rows < 1:
        raise DataError(f"budget of {targets} targets is less than one row of {R - 1}")
    if plan.runs_worker_streams:  # before any packer runs (audit_topology asks again, for its other callers)
        check_rows(rows, plan.topology.worker_streams)
    passes, sentence = horizon(targets, stream)
    print(f"audit of {stream.name}: {stream.n:,} documents per pass -> {plan.out}")
    print(f"budget: {targets:,} targets = {rows:,} rows ({reason})")
    print(sentence if passes <= 1 else f"note: {sentence}")
    announce_cost(stream, packers, rows, R, B)
    t0 = time.time()
    per = {}
    for p in bar(packers, desc="packers", unit="packer"):
        per[p] = audit_packer(stream, p, rows, R, B, work, plan.csv, user, fates=plan.fates)
    started = max((s.get("passes_started") or 1 for s in per.values() if "refused" not in s), default=1)
    if started > 1 and passes <= 1:
        passes, sentence = horizon(targets, stream, started)
        print(f"note: {sentence}")
    summary = {"stream": stream.name, "source": stream.kind, "targets": targets, "rows": rows, "budget_reason": reason,
               "row_capacity": R, "buffer": B, "horizon": {"passes": passes, "sentence": sentence},
               "labelled": stream.labels is not None, "csv": plan.csv, "packers": per,
               "corpus": stream.provenance, "passes_limit": stream.passes,
               "packer_seconds": {p: s.pop("seconds", None) for p, s in per.items()}}
    if plan.runs_permutations:
        summary["permutations"] = permutation_delays(stream, R, B, rows, plan.permutations, bar, engine,
                                                     replay_bytes(B, stream))
    summary["pass_bounds"] = stream_pass_bounds(stream, plan.thresholds, R, B)
    summary["left_out"] = dict(plan.left_out)  # packers the caller chose not to run, and why
    summary["comparison"] = comparison(summary)
    if "original" in per:
        summary["regime"] = regime(plan.stream.data_dir, stream, R, B, targets, per)
    if plan.pipeline:
        summary["pipeline"] = describe(plan)
    if plan.runs_worker_streams:
        t = plan.topology
        summary["topology"] = audit_topology(stream, packers, rows, R, B, work, t.streams_ranks, t.streams_workers,
                                             t.split, t.refill_docs, user, engine, plan.fates,
                                             replay_bytes(B, stream))
    summary["seconds"] = round(time.time() - t0, 2)
    return summary


def regime(data_dir, stream, R, B, targets, per):
    """Indicators of this audit's setting and, for the offline corpus, the tiny training preset."""
    cols = {"this audit": indicators_from(stream, R, B, targets, per["original"], per.get("segment_first"))}
    if stream.kind == "stdlib" and stream.name.endswith(":train"):
        cols["tiny training"] = tiny_training_column(data_dir)
    return {"columns": cols}


def write_figures(summary, work):
    # late: matplotlib (0.4 s) only for an audit that draws its figures, not one run with --no-figures
    from audit import plots

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
        if main["plot"]["length_counts"]:  # none where nothing arrived (a buffer the stream never fills: no row)
            fig("length_histogram.png", plots.length_histogram, main, R)
        if len(main["by_label"]) > 1:  # one label (or none given): nothing to compare
            fig("label_coverage.png", plots.label_coverage, per)
        exposed = [s for s in per if s["position_exposure"]]  # a packer no source arrived at has no strata to draw
        if exposed:
            fig("position_exposure.png", plots.position_exposure, exposed)
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
    Comparison.of(summary["comparison"]).write(work)
    if summary.get("regime"):
        atomic_write_json(work / "regime.json", summary["regime"])
    summary["folder_bytes"] = 0
    AuditSummary.of(summary).write(work)
    atomic_write_text(work / "report.md", report_md(summary))
    # the size stated in the report is the folder's, report and summary included (two passes: they hold it)
    for _ in range(2):
        summary["folder_bytes"] = sum(p.stat().st_size for p in work.iterdir() if p.is_file())
        AuditSummary.of(summary).write(work)
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


def check_plan_topology(plan, stream):
    """check_topology for the plan's worker streams; a refused split that a --pipeline preset chose says so (a user
    who never typed --split-by is told where it came from)."""
    preset = plan.pipeline is not None and plan.topology.split_by == plan.pipeline.split_by
    check_topology(stream.n, plan.topology.worker_streams, plan.topology.split, file_of(stream), file_count(stream),
                   f" (--pipeline {plan.pipeline_name}'s deal)" if preset else "")  # chosen_by


@interrupts
def run_audit(plan) -> int:
    """The audit of an AuditPlan (audit/plan.py) into its folder; the exit status (exit_status)."""
    out = Path(plan.out)
    try:
        check_out(out, plan.stream)  # before the stream is read: a refused --out costs nothing
        stream = load_stream(plan)
        check_datasets(stream, plan.packers)
        check_plan_topology(plan, stream)
        note = split_note(stream, plan.topology.split) if plan.runs_worker_streams else None
        if note:
            print(note)
        check_buffer(plan, stream)
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
        engine, workers = None, 1 if plan.user is not None else (plan.engine.workers or 1)
        if plan.runs_worker_streams or plan.runs_permutations:
            engine = stack.enter_context(open_engine(plan.engine.name, workers, plan.engine.ray_address,
                                                     plan.engine.verbose))
            engine.probe()  # before any compute: on Ray, every node at the driver's checkout (the lengths travel)
            check_node_memory(plan, stream, engine)
        clear_unfinished(out)
        work = new_folder(out)
        summary = compute(plan, stream, work, engine)
        write_folder(summary, stream, work, plan.figures)
        for tmp in work.glob(".*-work"):
            shutil.rmtree(tmp, ignore_errors=True)
        replace_whole(out, work)
    finally:
        if "work" in locals() and work.exists():
            shutil.rmtree(work, ignore_errors=True)
        stack.close()  # releases the lock
    print(console_summary(summary))
    events = ", events_*.parquet" if any(out.glob("events_*.parquet")) else ""
    print(f"wrote {out}: summary.json, comparison.json, report.md{events}, {len(summary['figures'])} figures, "
          f"{summary['folder_bytes'] / 1e6:,.1f} MB ({summary['seconds']}s)")
    return exit_status(summary, plan, out)


def exit_status(summary, plan, out) -> int:
    """1, with a line saying why where the report alone would: every packer refused the stream, or the researcher's own
    --trace packer failed on it (their code, not a finding about a library, whose refusal the report states); or a
    partition that does not add up or a Proposition violated, in a packer or a worker stream. Else 0."""
    ok = [s for s in summary["packers"].values() if "refused" not in s]
    if not ok:  # an audit of nothing: the report says why each refused, and the status is not a success
        why = "; ".join(f"{n}: {s['refused']}" for n, s in summary["packers"].items())
        print(f"error: every packer refused this stream ({why}); see {out / 'report.md'}", file=sys.stderr)
        return 1
    mine = summary["packers"].get(plan.user.name, {}) if plan.user is not None else {}
    if "refused" in mine or (mine and not mine["rows"]):
        why = mine.get("refused") or ("it yielded no row" + (
            f", though it read its input to the end ({mine['sources_arrived']:,} documents): they come once, as a "
            "loader's iterator gives them" if (mine.get("trace") or {}).get("input_ended") else ""))
        print(f"error: your packer {plan.user.name} failed on this stream ({why}); see {out / 'report.md'}",
              file=sys.stderr)
        return 1
    bad = [s for s in ok if not s["partition_holds"] or s["protected"]["proposition_held"] is False]
    for s in bad:
        why = (overdrawn(s) if not s["partition_holds"] else
               "the Proposition was violated (a protected source was selected)")
        print(f"error: {s['packer']}: {why}; see {out / 'report.md'}", file=sys.stderr)
    return 1 if bad or not topology_ok(summary.get("topology")) else 0
