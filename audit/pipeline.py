"""One audit: a stream, a budget and a list of packers -> summary (and events, figures) in a folder.

The paper's four packers are replayed on lengths (the selection core that trains); every
other packer is traced by running it (audit/trace.py, audit/adapters.py). Both write events
in chunks and fill the same tables; the report is written from the summary by
audit/report.py. No argument parsing here: the command line is audit/__main__.py.
"""
import shutil
import time
from dataclasses import dataclass

import numpy as np

from audit.adapters import BOS, FIRST_ID, PAD, SPECS, installed, library_version
from audit.compute import replay_packer, trace_packer
from audit.events import EventSink
from audit.fate_table import DocumentIndex, FateTable
from audit.libraries.common import Plan
from audit.feed import PassRefills
from audit.metrics import pass_bounds
from audit.replay import first_long_emission
from audit.spill import Folder
from errors import DataError
from fanout import Task
from fanout.local import LocalEngine
from loaders.core import PACKERS
from loaders.stream import DocumentStream


@dataclass
class StreamInput:
    """One pass of a stream in memory: lengths, refill boundaries, optional labels; index: where each document
    comes from (for the fate table), or None; passes: the passes the stream gives (None: it wraps for ever)."""
    name: str
    kind: str  # stdlib | climbmix | parquet | lengths | synthetic | corpus
    lengths: np.ndarray
    refills: np.ndarray
    labels: object = None
    index: DocumentIndex = None
    passes: int = None
    provenance: dict = None  # a corpus read where it lives: its inputs, tokenizer and BOS policy (corpus/readers)
    loader_args: dict = None  # --loader-arg values (audit/libraries/args.py): a loader's seed, split, weights, bins

    @property
    def n(self):
        return len(self.lengths)

    @property
    def tokens(self):
        return int(self.lengths.sum())

    def refill_source(self, max_passes=None):
        bound = [p for p in (max_passes, self.passes) if p is not None]
        return PassRefills(self.lengths, self.refills, self.labels, min(bound) if bound else None)


def check_packers(names, user=None):
    """The packers to audit, each known and its library installed; one line naming the extra if not."""
    out = []
    for p in names:
        if p in PACKERS:
            out.append(p)
        elif user is not None and p == user.name:
            out.append(p)
        elif p in SPECS:
            if not installed(SPECS[p]):
                raise DataError(f"--packers {p}: needs {SPECS[p].library}, which is not installed; install the "
                                f"'audit-libs' extra (pip install -r requirements-audit.lock)")
            out.append(p)
        else:
            raise DataError(f"--packers: unknown packer {p!r} (choose from {', '.join(PACKERS + tuple(SPECS))})")
    return out


def audit_packer(stream, name, rows, R, B, work, csv=False, user=None, progress=None, fates=True):
    """The summary of one packer at `rows` rows; events written into `work`, and with fates (and a stream
    that says where its documents come from) fates_<name>.parquet, one row per document."""
    spec = SPECS.get(name)
    if spec is not None and spec.audit is not None and (user is None or user.name != name):
        # a loader whose audit is not one trace of the stream (megatron_blend: its datasets' epochs differ)
        return spec.audit(stream, name, rows, R, B, work, csv, progress, fates, run=audit_packer)
    t0, passes, made = time.time(), None, -1
    while True:
        s = _audit_once(stream, name, rows, R, B, work, csv, user, progress, fates, passes)
        more = more_passes(s, rows, made)
        if more is None:
            break
        passes, made = more, s["rows"]
        shutil.rmtree(work / f".{name}-work", ignore_errors=True)  # the library's own files, made afresh
    s.pop("passes_cap", None)
    s["seconds"] = round(time.time() - t0, 2)
    return s


def more_passes(s, rows, made_before):
    """The passes to trace again with, or None: a traced packer on a stream that wraps gets as many passes as its
    budget needs, first what a packer that loses nothing would need; one that loses tokens (crops, drops a tail)
    ran out of input short of the budget and is traced again on more, for as long as it makes more rows."""
    cap = s.get("passes_cap")
    if cap is None or s["rows"] >= rows or s["rows"] <= max(made_before, 0):  # no rows, or no more: it never will
        return None
    want = -(-cap * rows * 11 // (10 * s["rows"]))  # the rows' share, 10 % over, rounded up
    return min(max(cap + 1, want), 8 * cap)  # at most 8 times the passes a try: a library may read all it is given


def _audit_once(stream, name, rows, R, B, work, csv, user, progress, fates, passes):
    sink = EventSink(work, name, csv)
    labelled = stream.labels is not None
    table = FateTable(Folder(work, f"{name}-fates"), stream.n) if fates and stream.index is not None else None
    try:
        if name in PACKERS:
            s = replay_packer(stream.refill_source(), name, rows, R, B, sink, labelled, progress, fates=table)
            s["how"] = "replayed"  # the selection core that trains, on lengths
            s["padding_share"] = 0.0
        else:
            s = _trace(stream, name, rows, R, B, work, user, sink, labelled, progress, table, passes)
        if table is not None:
            s["documents"] = table.write(work / f"fates_{name}.parquet", stream.index, s["row_capacity"])
    except Exception as e:  # a library refusing this stream is a finding about it, not a crash of the audit
        if name in PACKERS:
            raise
        sink.close()
        return {"packer": name, "refused": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    finally:
        if table is not None:
            table.spill.folder.close()
    sink.close()
    s["events_files"] = [p.name for p in (sink.parquet_path, sink.csv_path) if p is not None]
    if table is not None:
        s["fates_file"] = f"fates_{name}.parquet"
    return s


def _trace(stream, name, rows, R, B, work, user, sink, labelled, progress, table, passes=None):
    """A packer run on tracer documents (audit/trace.py) on the stream's passes (--passes), else on `passes`, else
    on as many as the budget needs if the packer loses nothing (audit_packer traces again on more where it does)."""
    spec = user if (user is not None and name == user.name) else SPECS[name]
    Rp = spec.row_capacity(R)
    cap = None
    if stream.passes is None and not spec.indexed:  # the stream wraps: a packer that reads it all must see an end
        cap = passes or max(1, -(-rows * Rp // stream.tokens))  # integer ceiling: no float rounding at 10^10 tokens
    plan = Plan(rows, stream.lengths, stream.labels, stream.passes, stream.loader_args or {}) if spec.planned else None
    # a loader that builds an index of its epochs pulls the passes it builds, as many as --passes allows
    refills = stream.refill_source(cap)
    w = work / f".{name}-work"
    packer = spec.build(R, B, w, plan) if plan is not None else spec.build(R, B, w)
    s = trace_packer(packer, refills, name, rows, Rp, B, FIRST_ID, BOS, PAD, sink=sink, label_names=labelled,
                     why_not=spec.why_not, progress=progress, fates=table)
    # the passes begun by the horizon (the packer's read-ahead into its buffer included): what it pulled by the
    # budget's last row, in passes; it may read on after (a drain, a library that reads its input in batches)
    s["passes_started"] = -(-s["sources_arrived"] // stream.n)
    if cap is not None and s["trace"]["stream_ended"]:
        s["passes_cap"] = cap  # its input ended at the passes given it: more_passes decides on more
    s["how"] = spec.how or "traced"  # the packer itself run on tracer documents, or a rule written from its code
    if plan is not None:
        s["loader"] = plan.facts
    s["library"] = {"name": spec.library, "version": library_version(spec)} if spec.library else (
        {"name": spec.how, "version": None} if spec.how else None)  # a rule names the library code it was read from
    s["settings"] = spec.settings
    return s


def permutation_delays(stream, R, B, rows, count, bar=lambda x, **k: x, engine=None, memory=0):
    """First emission of a source longer than R under seeded arrival-order permutations (original). Each
    permutation, and the stream as it is, is a task of the fan-out engine (fanout/: in this process by default),
    holding `memory` bytes at most (a replay's: Task.memory)."""
    seeds, engine = list(range(count)), engine or LocalEngine()
    lengths, refills = engine.share(stream.lengths), engine.share(stream.refills)  # once, however many permutations
    tasks = [Task(permuted_delay, (lengths, refills, R, B, rows, s), small=True, memory=memory,  # batched on Ray
                  name="stream as it is" if s is None else f"permutation {s}") for s in [None, *seeds]]
    got = iter(engine.run(tasks))
    unpermuted = next(got)
    delays = list(bar(got, total=count, desc="permutations"))
    found = [d for d in delays if d is not None]
    return {"count": count, "seeds": seeds, "delays": delays, "min": min(found) if found else None,
            "max": max(found) if found else None, "unpermuted": unpermuted}


def permuted_delay(lengths, refills, R, B, rows, seed=None):
    """The first long emission of the stream under one seeded permutation (seed None: as it is)."""
    ds = DocumentStream(lengths, refills)
    return first_long_emission(ds if seed is None else ds.permuted(seed), R, B, max_rows=rows)


def stream_pass_bounds(stream, thresholds, R, B):
    top = int(stream.lengths.max())
    thr = sorted({t for t in thresholds if t <= top} | {top})
    vals, counts = np.unique(stream.lengths, return_counts=True)
    return pass_bounds(vals, counts, [t for t in thr if t > R], B)


def horizon(targets, stream, started=1):
    """The budget against one pass: (passes, sentence); started: the most passes a packer began."""
    passes = targets / stream.tokens
    if stream.passes is not None and passes > stream.passes:  # --passes: the stream ends before the budget
        return passes, (f"The budget is {passes:,.2f} passes over this corpus ({targets:,} targets against "
                        f"{stream.tokens:,} tokens per pass), but --passes {stream.passes} ends the stream first: a "
                        f"packer makes the budget's rows only with padding or rows cut short (the report says which "
                        f"did).")
    if passes <= 1 and started > 1:
        return passes, (f"The budget is {passes:.1%} of one pass over this corpus, but the buffer reads ahead: "
                        f"{started} passes began, so some sources arrived "
                        f"{'twice' if started == 2 else f'up to {started} times'}.")
    if passes > 1:
        return passes, (f"The budget is {passes:,.1f} passes over this corpus ({targets:,} targets against "
                        f"{stream.tokens:,} tokens per pass); every source arrives repeatedly.")
    return passes, (f"The budget is {passes:.1%} of one pass over this corpus ({targets:,} targets against "
                    f"{stream.tokens:,} tokens per pass).")
