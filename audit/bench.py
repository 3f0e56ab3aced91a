#!/usr/bin/env python3
"""Benchmarks of the audit, each a ratio or a growth measured in the same run.

  python audit/bench.py                        # everything below at the default sizes
  python audit/bench.py --scale 5,6,7,8,9      # the scale table up to 10^9 documents (minutes)
  python audit/bench.py --only paper,decode    # some sections

paper   the paper-scale audit (846,848 sources, 499,646,464 targets, R = 2049, B = 1000, every table, the
        events in arrays; then also written to parquet) on the compiled core against the same audit on
        the Python core of before (loaders/reference.py ReferenceCore), in this process (the goal: at
        least 15x), and the compiled core against the literal list-scanning reference
decode  the trace's own work per emitted token (decoding rows, resolving fates, the tables)
        against each installed library packer producing the same rows: the ratio to the fastest
scale   replay (lengths memory-mapped from a .npy file) and trace (concat_chunk, lengths generated a
        chunk at a time) on census-shaped streams of 10^k documents: time, peak memory (each size in a
        fresh process) and growth per 10x, against the goals: replay from 10^6 on and trace 10^5 ->
        10^6 at most 11x time and 1.3x memory per 10x, every size under 1 GB
checker the standard-library checker's bucketed replay against its literal list scan, and its
        largest buffer (B = 1,000,000) on a small stream
corpus  the corpus length pass (corpus/readers): documents/s from a token-list column of an Arrow file (goal
        >= 10^7), text through the pass against `tokenizers` encode_batch alone on the same texts (goal >= 0.8x),
        and 2 workers against 1 (goal >= 1.7x on 2 idle cores); all in one run, each a median of --corpus-rounds
fanout  the audit's 200 arrival-order permutations of the paper's census (what `--synthetic --permutations 200`
        runs) on a local Ray (--engine ray, batched) against the local engine (in this process): rounds of the two
        back to back, the first Ray round with its workers' start; goal: Ray within 2x; and the Ray start itself
"""
import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402

from audit.adapters import BOS, FIRST_ID, PAD, SPECS, concat_chunk, installed  # noqa: E402
from audit.compute import finish, lead_flags, protected_of, protected_unstarted, replay_packer, trace_packer  # noqa: E402
from audit.events import EventSink, records_from_columns  # noqa: E402
from audit.feed import ChunkedRefills, MappedRefills, PassRefills  # noqa: E402
from audit.pipeline import StreamInput, permutation_delays  # noqa: E402
from audit.proposition import PropositionWatch  # noqa: E402
from audit.replay import PAPER_TARGETS, rows_for_targets  # noqa: E402
from audit.synthetic import PAPER_SOURCES, PAPER_TOKENS, census_chunks, paper_like_lengths  # noqa: E402
from audit.trace import TracerDocs, row_tokens  # noqa: E402
from audit.tally import Tally  # noqa: E402
from checkers import packing_checker  # noqa: E402
from errors import DataError  # noqa: E402
from corpus.readers import corpus_lengths  # noqa: E402
from corpus.readers.encoders import restore, single_threaded  # noqa: E402
from fanout import open_engine  # noqa: E402
from fanout.local import LocalEngine  # noqa: E402
from loaders.core import PackerCore  # noqa: E402
from loaders.reference import ReferenceCore  # noqa: E402
from loaders.stream import DocumentStream  # noqa: E402

MEAN_LEN = PAPER_TOKENS / PAPER_SOURCES  # 745.4 tokens, BOS included


PYTHON_CHUNK_ROWS = 4096  # the Python core's chunk of rows, as the streaming audit before the compiled core took them


def python_audit(stream, packer, rows, R, B, sink=None):
    """The audit as it ran on the Python core before the compiled one (loaders/reference.py ReferenceCore, the
    tables fed its event tuples a chunk of rows at a time, the Proposition watched in Python), in this process:
    the baseline of the paper section. Its summary (no figure data) equals the compiled audit's."""
    core, tally, watch = ReferenceCore(stream, packer, R, B), Tally(R, rows * (R - 1)), PropositionWatch(B, R)
    core.refill_log, done, n = [], 0, stream.n
    while done < rows:
        k, raw, log0 = min(PYTHON_CHUNK_ROWS, rows - done), [], len(core.refill_log)
        core.pack_rows(k, raw)
        arrivals = [(e, first, stream.lengths[np.arange(first, first + cnt) % n], None)
                    for e, first, cnt in core.refill_log[log0:]]
        if arrivals:
            tally.arrive(arrivals[0][1], np.concatenate([x[2] for x in arrivals]))
        a = np.asarray(raw, np.int64).reshape(-1, 6)
        pos = done * R + np.cumsum(a[:, 2]) - a[:, 2]
        rec = records_from_columns(a[:, 0], stream.lengths[a[:, 0] % n], a[:, 1], a[:, 2], a[:, 3], pos // R, pos % R,
                                   a[:, 4], a[:, 5], R)
        tally.add_events(rec, *lead_flags(packer, rec["lead_bos"]))
        watch.feed(raw, arrivals, candidates=np.flatnonzero(rec["source_len"] > R))
        if sink is not None:
            sink.write(rec)
        tally.retire(np.unique(np.fromiter((x[0] for x in core.spans.values()), np.int64, len(core.spans))))
        done += k
    prot = protected_of(watch, protected_unstarted(tally.live, watch.ps.members))
    out = finish(tally, prot, packer, rows, R, B, core.pass_idx + (1 if core.refill_idx else 0), core.added_bos,
                 core.buffered_tokens(), [])
    out.pop("plot")
    return out


def _timed(how, stream, packer, rows, events):
    """(wall seconds, CPU seconds of this process, summary without figure data) of one paper-scale audit, events to
    parquet in a temporary folder when `events`."""
    with tempfile.TemporaryDirectory() as d:
        sink = EventSink(d, packer) if events else None
        t, c = time.perf_counter(), time.process_time()
        if how == "python":
            out = python_audit(stream, packer, rows, 2049, 1000, sink)
        else:
            out = replay_packer(PassRefills(stream.lengths, stream.refills), packer, rows, 2049, 1000, sink)
            out.pop("plot")
        if sink is not None:
            sink.close()
        return time.perf_counter() - t, time.process_time() - c, out


PAPER_GOAL = 15.0  # the compiled audit at least this many times as fast as the Python one


def bench_paper(rounds=9, packer="original", ref_rows=400):
    """The paper-scale audit on the compiled core against the same audit on the Python core, in this process, back to
    back, `rounds` times, which goes first alternating; without and with the events file. This machine's speed
    drifts by a third within minutes, so the goal is judged on each round's ratio (its two runs see the same
    speed), by the interval for their median (paper_verdict), in wall time and in CPU time (a machine shared with
    other work takes the short compiled runs' wall time off course more than the Python ones')."""
    stream = DocumentStream.from_lengths(paper_like_lengths(), name="synthetic")
    rows = rows_for_targets(PAPER_TARGETS, 2049)
    replay_packer(PassRefills(stream.lengths, stream.refills), packer, 10, 2049, 1000)  # the machine code loaded
    secs, summary = {(how, ev, clock): [] for how in ("python", "compiled") for ev in (False, True)
                     for clock in ("wall", "CPU")}, None
    for r in range(rounds):
        for ev in (False, True):
            for how in (("python", "compiled") if r % 2 == 0 else ("compiled", "python")):
                wall, cpu, out = _timed(how, stream, packer, rows, ev)
                secs[how, ev, "wall"].append(wall)
                secs[how, ev, "CPU"].append(cpu)
                summary = summary or out
                assert r or ev or out == summary, "the two audits disagree"
    print(f"paper scale: {rows:,} rows, {summary['selection_events']:,} selection events, {packer}; {rounds} "
          f"rounds in this process, the two audits back to back")
    for ev, label in ((False, "events in arrays and every table"), (True, "... and the events file written")):
        for clock in ("wall", "CPU"):
            py, co = secs["python", ev, clock], secs["compiled", ev, clock]
            ratios = [p / c for p, c in zip(py, co)]
            lo, hi, cover = median_interval(ratios)
            print(f"  {label}, {clock} time: Python core {statistics.median(py):.2f}s, compiled "
                  f"{statistics.median(co):.3f}s (medians); ratios {', '.join(f'{x:.1f}' for x in ratios)}, median "
                  f"{statistics.median(ratios):.1f}x [{lo:.1f}, {hi:.1f}] ({cover:.0%} interval): goal at least "
                  f"{PAPER_GOAL:g}x: {paper_verdict(ratios, PAPER_GOAL)}")
    head = PackerCore(stream, packer, 2049, 1000).pack_rows(ref_rows).tolist()
    refills = [stream.lengths[i:i + 128].tolist() for i in range(0, stream.n, 128)]
    t = time.perf_counter()
    ev, _ = packing_checker.replay_literal(refills, packer, 2049, 1000, ref_rows)
    rt = time.perf_counter() - t
    assert [tuple(e[:4]) for e in ev] == [tuple(e[:4]) for e in head], "reference disagrees"
    core = PackerCore(stream, packer, 2049, 1000)
    t = time.perf_counter()
    n_events = len(core.pack_rows(rows))
    print(f"  core against the literal reference ({ref_rows} rows): "
          f"{(n_events / (time.perf_counter() - t)) / (len(ev) / rt):,.0f}x events/s")


MEDIAN_LEVEL = 0.9  # the least coverage a verdict needs: five rounds at least (their range: 94%); nine give 96%
MIN_ROUNDS = 5


def paper_verdict(ratios, goal=PAPER_GOAL):
    """The paper-scale goal from each round's speed-up (Python time over compiled time): it holds when the interval
    for their median is at least `goal`, is missed when it is below, and is otherwise undecided."""
    lo, hi, coverage = median_interval(ratios)
    if coverage < MEDIAN_LEVEL:
        return f"undecided: {len(ratios)} rounds are too few for a {MEDIAN_LEVEL:.0%} interval"
    return "holds" if lo >= goal else "MISSED" if hi < goal else "undecided at this machine's noise"


def median_interval(values, level=MEDIAN_LEVEL):
    """The distribution-free interval for the median of values: order statistics [x(k), x(n + 1 - k)], with the
    largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least level (at least k = 1, the range, whose
    coverage is 1 - 2 / 2^n: 94% at five values; at nine, [x(2), x(8)] covers 96%, so one noisy round decides nothing
    alone)."""
    x, n = sorted(values), len(values)

    def coverage(k):
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while coverage(k + 1) >= level:  # coverage falls below 0 before k passes the middle
        k += 1
    return x[k - 1], x[n - k], coverage(k)


def _in_fresh_process(*args):
    """This script run with args in a new interpreter: the JSON line it prints last."""
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _stream_of(n, seed=1):
    lengths = np.concatenate(list(census_chunks(n, seed)))
    return lengths, np.append(np.arange(0, n, 128), n)


def _replayed(rows):
    """A packer that pulls every document and yields rows made before: what remains is the audit's work."""
    def run(docs):
        for _ in docs:
            pass
        yield from rows
    return run


def bench_decode(n_docs=20_000, R=2049):
    """Per emitted token: each library producing rows, and the audit's work on those same rows."""
    lengths, bounds = _stream_of(n_docs)
    rows_budget = int(0.75 * lengths.sum()) // R
    best = None
    for name, spec in SPECS.items():
        # first fit: minutes of library time (run.py says why); a loader built from the audit's plan (Megatron, Grain,
        # the rules) or audited its own way (the blend) is not a packer of documents alone
        if not installed(spec) or name == "titan_first_fit" or spec.planned or spec.audit is not None:
            continue
        with tempfile.TemporaryDirectory() as d:
            docs = TracerDocs(PassRefills(lengths, bounds, max_passes=1), FIRST_ID)
            t = time.perf_counter()
            rows = [row_tokens(r) for r in spec.build(R, 1000, Path(d) / "lib")(docs)]
            lib = time.perf_counter() - t
            tokens = sum(len(r) for r in rows)
            t = time.perf_counter()
            trace_packer(_replayed(rows), PassRefills(lengths, bounds, max_passes=1), name, rows_budget,
                         spec.row_capacity(R), 1000, FIRST_ID, BOS, PAD)
            audit = time.perf_counter() - t
        print(f"  {name:16s} {'ours' if not spec.library else 'library':>7} {1e9 * lib / tokens:7.1f} ns/token   "
              f"audit {1e9 * audit / tokens:6.1f} ns/token")
        if spec.library and (best is None or lib / tokens < best[1]):
            best = (name, lib / tokens, audit / tokens)
    if best:
        print(f"decode: the fastest library packer is {best[0]} ({1e9 * best[1]:.1f} ns per emitted token); the audit's "
              f"own work on its rows is {1e9 * best[2]:.1f} ns: ratio library/audit {best[1] / best[2]:.1f}x "
              f"(goal: at least 10x)")


def one_scale(what, n, lengths=None):
    """One size in this process: (seconds, peak RSS bytes); the caller runs it in a fresh process. The replay reads
    its lengths from the .npy file `lengths`, memory-mapped a window at a time; the trace generates them a chunk at
    a time."""
    R, B = 2049, 1000
    rows = int(0.75 * n * MEAN_LEN) // R  # one pass or less of the stream
    with tempfile.TemporaryDirectory() as d:
        sink = EventSink(d, what)
        t = time.perf_counter()
        if what == "replay":
            s = replay_packer(MappedRefills(lengths), "original", rows, R, B, sink)
        else:
            s = trace_packer(concat_chunk(R), ChunkedRefills(census_chunks(n)), "concat_chunk", rows, R, B, FIRST_ID,
                             sink=sink)  # events written, as the audit writes them
        sink.close()
        dt = time.perf_counter() - t
    return {"seconds": dt, "peak_bytes": peak_rss(), "events": s["selection_events"], "rows": rows}


def write_lengths(n, path):
    """n census-shaped lengths (audit/synthetic.py census_chunks) into a .npy file of int32, a chunk at a time."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(n,))
    done = 0
    for c in census_chunks(n):
        out[done:done + len(c)] = c
        done += len(c)
    out.flush()
    del out


def peak_rss():
    """This process's peak resident memory: VmHWM (Linux: reset by exec, unlike ru_maxrss, which a child
    inherits from the process that forked it), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r if sys.platform == "darwin" else r * 1024


# growth per 10x documents the scale section checks: (what, from 10^k, to 10^(k+1)) -> (time x, memory x) at most
SCALE_GOALS = {**{("replay", k, k + 1): (11.0, 1.3) for k in (6, 7, 8)}, ("trace", 5, 6): (11.0, 1.3)}
PEAK_GOAL = 1e9  # bytes: every size of the scale table under one gigabyte


def bench_scale(exps, trace_exps):
    print("scale: census-shaped streams, 75% of a pass, R = 2049, B = 1000, one process per size; the replay's lengths "
          "in a .npy file (int32, written first, not timed) memory-mapped a window at a time, the trace's generated "
          "a chunk at a time; events written to parquet")
    print(f"{'what':>7} {'documents':>14} {'events':>14} {'seconds':>9} {'peak MB':>9} "
          f"{'time x per 10x':>15} {'memory x per 10x':>17}")
    got = {}
    with tempfile.TemporaryDirectory() as d:
        for what, es in (("replay", exps), ("trace", trace_exps)):
            prev = None
            for e in es:
                path = Path(d) / f"lengths_{e}.npy"
                if what == "replay":
                    write_lengths(10 ** e, path)
                try:
                    m = got[what, e] = _in_fresh_process("--one-scale", what, str(10 ** e), str(path))
                except RuntimeError as err:
                    print(f"{what:>7} {10 ** e:>14,} {err}")
                    break
                finally:
                    path.unlink(missing_ok=True)
                grow = "" if prev is None else (f"{m['seconds'] / prev['seconds']:15.1f} "
                                                f"{m['peak_bytes'] / prev['peak_bytes']:17.2f}")
                print(f"{what:>7} {10 ** e:>14,} {m['events']:>14,} {m['seconds']:>9.1f} {m['peak_bytes'] / 1e6:>9.0f} "
                      f"{grow}", flush=True)
                prev = m
    print("  time should grow about 10x per 10x documents, memory hardly at all (the buffers, a window of lengths and a "
          "chunk of events, not the stream; the trace's documents and decoded emissions wait on disk)")
    for line in scale_goals(got):
        print(line)


def scale_goals(got):
    """One line per goal the measured sizes reach: the ratio beside its target, and whether it holds."""
    lines = []
    for (what, a, b), (t_max, m_max) in SCALE_GOALS.items():
        if (what, a) in got and (what, b) in got:
            t = got[what, b]["seconds"] / got[what, a]["seconds"]
            m = got[what, b]["peak_bytes"] / got[what, a]["peak_bytes"]
            ok = t <= t_max and m <= m_max
            lines.append(f"goal: {what} 10^{a} -> 10^{b} documents: time {t:.1f}x (at most {t_max:g}x), memory {m:.2f}x "
                         f"(at most {m_max:g}x): {'holds' if ok else 'MISSED'}")
    if got:
        (what, e), m = max(got.items(), key=lambda kv: kv[1]["peak_bytes"])
        ok = m["peak_bytes"] < PEAK_GOAL
        lines.append(f"goal: every size under {PEAK_GOAL / 1e9:g} GB peak (largest: {what} 10^{e}, "
                     f"{m['peak_bytes'] / 1e6:,.0f} MB): {'holds' if ok else 'MISSED'}")
    return lines


def bench_checker():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 3000, 20_000).tolist()
    refills = [lengths[i:i + 128] for i in range(0, len(lengths), 128)]
    for rows in (200,):
        t = time.perf_counter()
        fast, _ = packing_checker.replay(refills, "original", 2049, 1000, rows)
        tf = time.perf_counter() - t
        t = time.perf_counter()
        lit, _ = packing_checker.replay_literal(refills, "original", 2049, 1000, rows)
        tl = time.perf_counter() - t
        assert fast == lit
        print(f"checker: {rows} rows at B = 1000: bucketed {tf:.3f}s, literal list scan {tl:.3f}s: {tl / tf:.0f}x")
    small = [rng.integers(1, 300, 128).tolist() for _ in range(16)]
    t = time.perf_counter()
    ev, _ = packing_checker.replay(small, "original", 257, 1_000_000, 40, with_arrivals=False)
    print(f"checker: B = 1,000,000 on a 2,048-document stream (a million arrivals before the first selection), "
          f"40 rows: {time.perf_counter() - t:.2f}s on one core")


def corpus_texts(n, seed=7, vocab=20_000):
    """n documents of made-up words (Zipf-like word frequencies, lognormal lengths, a median of ~150 words)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    words = ["".join(rng.choice(letters, k)) for k in rng.integers(2, 10, vocab)]
    freq = 1.0 / np.arange(1, vocab + 1)
    picks = rng.choice(vocab, int(rng.lognormal(5.0, 0.6, n).sum()) + n, p=freq / freq.sum())
    cuts = np.cumsum(np.maximum(1, rng.lognormal(5.0, 0.6, n).astype(np.int64)))
    cuts = cuts[cuts < len(picks)]
    return [" ".join(words[i] for i in doc) for doc in np.split(picks, cuts)[: len(cuts)]]


def bench_corpus_tokens(folder, n=4_000_000, rounds=3):
    """Documents/s of the pass from a token-list column of an Arrow stream (what datasets' save_to_disk writes,
    1,000-row batches), BOS auto (each first token read); its SHA256 once first, then remembered."""
    rng = np.random.default_rng(11)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(rng.integers(0, 12, n), out=offsets[1:])
    values = rng.integers(0, 50_000, int(offsets[-1])).astype(np.int32)
    values[offsets[:-1][::2]] = 1  # half the documents start with the BOS
    col = pa.ListArray.from_arrays(offsets, values)
    path = Path(folder) / "tokens.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, pa.schema([("input_ids", col.type)])) as w:
        w.write_table(pa.table({"input_ids": col}), max_chunksize=1000)
    cache = Path(folder) / "cache"
    t = time.perf_counter()
    first = corpus_lengths([path], bos_id=1, cache_dir=cache, workers=1, progress=False)
    hashing = time.perf_counter() - t
    want = np.diff(offsets) + (values[offsets[:-1]] != 1) * (np.diff(offsets) > 0) + (np.diff(offsets) == 0)
    assert np.array_equal(first.lengths, want)
    times = []
    for _ in range(rounds):
        for d in cache.glob("lengths-*"):  # the lengths forgotten, the SHA256 kept
            shutil.rmtree(d)
        t = time.perf_counter()
        corpus_lengths([path], bos_id=1, cache_dir=cache, workers=1, progress=False)
        times.append(time.perf_counter() - t)
    rate = n / statistics.median(times)
    print(f"corpus: token-list column, {n:,} documents ({path.stat().st_size / 1e6:,.0f} MB Arrow): "
          f"{rate:,.0f} documents/s (median of {rounds}; goal >= 10,000,000: {'met' if rate >= 1e7 else 'NOT met'}); "
          f"the first pass, SHA256 of the file included: {n / hashing:,.0f} documents/s")
    return rate


def _cpu_seconds():
    """User and system seconds of this process and of its finished children (the length pass's worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bench_corpus_text(folder, n, rounds=3, files=8):
    """The pass over a text column (n documents in `files` parquet files, a byte-level BPE trained here) with
    1 worker against `tokenizers` encode_batch alone on the same texts in memory (one thread each: the pass turns
    the tokenizer's own thread pool off), and with 2 workers against 1: medians of rounds whose order alternates,
    in wall time and, for the two that run in this process, in its CPU time (steadier on a shared machine)."""
    texts = corpus_texts(n)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts[:2000], trainers.BpeTrainer(
        vocab_size=8192, special_tokens=["<bos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.save(str(Path(folder) / "bpe.json"))
    k = -(-n // files)
    paths = []
    for i in range(files):
        paths.append(Path(folder) / f"text{i}.parquet")
        pq.write_table(pa.table({"text": texts[i * k:(i + 1) * k]}), paths[-1])
    cache = Path(folder) / "text_cache"
    bpe = str(Path(folder) / "bpe.json")
    corpus_lengths(paths, bpe, workers=1, cache_dir=cache, progress=False)  # SHA256s remembered, as on a rerun

    def alone():
        old = single_threaded()
        try:
            return [len(e) + 1 for e in tok.encode_batch(texts, add_special_tokens=False)]
        finally:
            restore(old)

    def the_pass(workers):
        for d in cache.glob("lengths-*"):  # the lengths forgotten, the SHA256s kept
            shutil.rmtree(d)
        return corpus_lengths(paths, bpe, workers=workers, cache_dir=cache, progress=False).lengths.tolist()

    runs = {"alone": alone, "1 worker": lambda: the_pass(1), "2 workers": lambda: the_pass(2)}
    wall, cpu = {k: [] for k in runs}, {k: [] for k in runs}
    want, load0 = alone(), os.getloadavg()[0]
    for r in range(rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):  # the order alternates: no drift favoured
            c, t = _cpu_seconds(), time.perf_counter()
            assert runs[name]() == want
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(_cpu_seconds() - c)
    _print_corpus_text(len(texts), sum(want), files, wall, cpu, load0)
    return wall, cpu


def _print_corpus_text(n, tokens, files, wall, cpu, load0):
    med = statistics.median
    vs_alone, vs_alone_cpu = med(wall["alone"]) / med(wall["1 worker"]), med(cpu["alone"]) / med(cpu["1 worker"])
    vs_one = med(wall["1 worker"]) / med(wall["2 workers"])
    print(f"corpus: text, {n:,} documents, {tokens:,} tokens in {files} parquet files: encode_batch alone "
          f"{tokens / med(wall['alone']):,.0f} tokens/s, the pass with 1 worker {tokens / med(wall['1 worker']):,.0f} "
          f"tokens/s, with 2 {tokens / med(wall['2 workers']):,.0f} tokens/s (medians of {len(wall['alone'])})")
    print(f"corpus: the pass against encode_batch alone {vs_alone:.2f}x in wall time, {vs_alone_cpu:.2f}x in CPU "
          f"time (goal >= 0.8x: {'met' if min(vs_alone, vs_alone_cpu) >= 0.8 else 'NOT met'}); 2 workers against 1 "
          f"{vs_one:.2f}x (goal >= 1.7x on 2 idle cores: {'met' if vs_one >= 1.7 else 'NOT met'}; {os.cpu_count()} "
          f"cores here, load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after)")
    print("corpus: rounds, wall seconds (CPU seconds, the workers' included): " + "; ".join(
        f"{k} " + ", ".join(f"{w:.2f} ({c:.2f})" for w, c in zip(wall[k], cpu[k])) for k in wall))


def bench_corpus(docs, rounds):
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as d:
        bench_corpus_tokens(d, rounds=rounds)
        bench_corpus_text(d, docs, rounds=rounds)


SECTIONS = ("paper", "decode", "scale", "checker", "corpus", "fanout")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of sections ({', '.join(SECTIONS)})")
    ap.add_argument("--scale", default="5,6,7", help="replay sizes, as powers of ten (8: 10^8 documents)")
    ap.add_argument("--trace-scale", default="5,6", help="trace sizes, as powers of ten")
    ap.add_argument("--decode-docs", type=int, default=20_000, help="documents of the decode comparison")
    ap.add_argument("--rounds", type=int, default=9,
                    help=f"paper: rounds of the two replays, each in a fresh process (at least {MIN_ROUNDS})")
    ap.add_argument("--corpus-docs", type=int, default=40_000, help="corpus: text documents of the length pass")
    ap.add_argument("--corpus-rounds", type=int, default=3, help="corpus: rounds of each measurement")
    ap.add_argument("--one-scale", nargs=3, metavar=("WHAT", "N", "LENGTHS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one_scale:
        print(json.dumps(one_scale(a.one_scale[0], int(a.one_scale[1]), a.one_scale[2])))
        return 0
    try:  # every value checked before the first section runs (minutes)
        only = {x.strip() for x in a.only.split(",") if x.strip()}
        unknown = sorted(only - set(SECTIONS))
        if unknown or not only:
            raise ValueError(f"--only {a.only!r}: {'unknown section ' + ', '.join(unknown) if unknown else 'no section'}"
                             f"; choose from {', '.join(SECTIONS)}")
        scale, trace_scale = (powers(flag, v) for flag, v in (("--scale", a.scale), ("--trace-scale", a.trace_scale)))
        if a.decode_docs < 1:
            raise ValueError(f"--decode-docs {a.decode_docs}: must be at least 1")
        if a.rounds < MIN_ROUNDS:
            raise ValueError(f"--rounds {a.rounds}: at least {MIN_ROUNDS} (fewer give no {MEDIAN_LEVEL:.0%} interval "
                             f"for the median ratio)")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "paper" in only:
        bench_paper(a.rounds)
    if "decode" in only:
        bench_decode(a.decode_docs)
    if "scale" in only:
        bench_scale(scale, trace_scale)
    if "checker" in only:
        bench_checker()
    if "corpus" in only:
        bench_corpus(a.corpus_docs, a.corpus_rounds)
    if "fanout" in only:
        bench_fanout()
    return 0


FANOUT_GOAL = 2.0  # Ray's permutations at most this many times the local engine's time


def bench_fanout(permutations=200, rounds=5):
    """The permutations on a local Ray (started once, here) and on the local engine, `rounds` times back to back,
    which goes first alternating; each round's ratio Ray / local, the first with Ray's workers starting (what one
    command pays), and the median of the others. The delays must be equal."""
    lengths = paper_like_lengths()
    stream = StreamInput("synthetic-paper-census", "synthetic", lengths, np.append(np.arange(0, len(lengths), 128),
                                                                                  len(lengths)))
    rows = rows_for_targets(PAPER_TARGETS, 2049)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    try:
        with open_engine("ray") as ray_engine:
            started = time.perf_counter() - t
            secs, ratios = _fanout_rounds(stream, rows, permutations, rounds, ray_engine)
    except DataError as e:
        print(f"fanout: skipped ({e})")
        return
    warm = statistics.median(ratios[1:]) if len(ratios) > 1 else ratios[0]
    print(f"fanout: {permutations} permutations of the paper's census ({stream.n:,} documents, R 2049, B 1000), "
          f"{rounds} rounds back to back, {os.cpu_count()} cores here (load average {load0:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after); equal delays on both engines")
    print(f"  local engine (this process): {', '.join(f'{x:.2f}' for x in secs['local'])} s")
    print(f"  Ray (batched): {', '.join(f'{x:.2f}' for x in secs['ray'])} s; the local Ray's start {started:.2f} s")
    print(f"goal: Ray within {FANOUT_GOAL:g}x the local engine: first round (its workers starting) {ratios[0]:.2f}x, "
          f"the others' median {warm:.2f}x: {'holds' if max(ratios[0], warm) <= FANOUT_GOAL else 'MISSED'}")


def _fanout_rounds(stream, rows, permutations, rounds, ray_engine):
    secs, ratios, first = {"local": [], "ray": []}, [], None
    for r in range(rounds):
        got = {}
        for name in (("local", "ray") if r % 2 == 0 else ("ray", "local")):
            t = time.perf_counter()
            got[name] = permutation_delays(stream, 2049, 1000, rows, permutations,
                                           engine=ray_engine if name == "ray" else LocalEngine())["delays"]
            secs[name].append(time.perf_counter() - t)
        first = first or got["local"]
        assert got["ray"] == got["local"] == first, "the engines disagree on the delays"
        ratios.append(secs["ray"][-1] / secs["local"][-1])
    return secs, ratios


def powers(flag, text):
    """A comma list of powers of ten (1 to 9), or ValueError naming the option."""
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected comma-separated powers of ten (e.g. 5,6,7)") from None
    if any(not 1 <= k <= 9 for k in ks):
        raise ValueError(f"{flag} {text!r}: powers of ten from 1 to 9")
    return ks


if __name__ == "__main__":
    sys.exit(main())
