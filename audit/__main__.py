"""Exact CPU audit: who is emitted, discarded, buffered or never started.

  python -m audit --source stdlib                    # offline corpus, scaled budget
  python -m audit --source climbmix                  # the paper's 499,646,464 targets
  python -m audit --synthetic                        # paper-shaped synthetic census
  python -m audit --lengths MY_LENGTHS.txt --row-capacity 4097 --buffer 1000 --targets N
                                                     # your own corpus: lengths in arrival order

Replays the length stream of a prepared corpus (or of a researcher's own length file:
one integer per line, a .npy array or a .parquet column; see audit/lengths_file.py) through the packers (the selection core
that trains, on lengths only) and writes to --out: events_<packer>.parquet and .csv,
stream_lengths.txt (one refill per line, for checkers/packing_checker.py), summary.json,
regime.json, report.md and four PNG figures. The output is written into a temporary
sibling folder and swapped in at the end, under a lock: a failed or concurrent audit never
leaves a mix of old and new files.
"""
import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import numpy as np

from audit.replay import PAPER_TARGETS, TARGETS_PER_UPDATE, Replay, first_long_emission, rows_for_targets
from corpus.errors import DataError
from loaders.core import PACKERS

# Corpora that prepare.py writes under the data root; a corpus prepared from your own parquet
# files is prepare.py --source parquet.
PREPARED_SOURCES = ("stdlib", "climbmix", "parquet")
OFFICIAL_TARGETS = 160 * 64 * 2048  # 20,971,520
PAPER_TOKEN_FRACTION = PAPER_TARGETS / 631_241_817  # the paper's budget as a share of its corpus


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m audit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--source", choices=PREPARED_SOURCES, default="stdlib",
                     help="prepared corpus (default stdlib; parquet: your own, prepare.py --source parquet)")
    src.add_argument("--synthetic", action="store_true", help="audit the paper-shaped synthetic census stream instead")
    src.add_argument("--lengths", metavar="FILE", help="audit your own corpus: document lengths in arrival order "
                     "(one integer per line, .npy, or .parquet with --column)")
    ap.add_argument("--column", default=None, help="the length column of a --lengths .parquet file")
    ap.add_argument("--refill-docs", type=int, default=128,
                    help="documents per buffer refill for --lengths (default 128, the pinned baseline's slice)")
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--split", choices=["train", "val"], default="train",
                    help="train: the eligible training corpus (default); val: the official development stream, "
                         "whose default budget is the official 20,971,520 targets (climbmix)")
    ap.add_argument("--packers", default="all", help=f"comma list of {', '.join(PACKERS)} or 'all'")
    b = ap.add_mutually_exclusive_group()
    b.add_argument("--updates", type=int, help="budget in optimizer updates of 524,288 targets")
    b.add_argument("--targets", type=int, help="budget in targets (a multiple of R-1); default: the paper's "
                   "499,646,464 for climbmix/synthetic, the same share of the corpus (79%%) for stdlib")
    ap.add_argument("--row-capacity", type=int, default=2049, help="R = context + 1 (default 2049)")
    ap.add_argument("--buffer", type=int, default=1000, help="minimum buffered spans B (default 1000)")
    ap.add_argument("--permutations", type=int, default=20, help="seeded arrival-order permutations for the startup delay (default 20)")
    ap.add_argument("--thresholds", default="16384,32768,65536,131072",
                    help="length thresholds of the repeated-corpus table (the longest source is always added)")
    ap.add_argument("--out", default="runs/audit", help="output folder (default runs/audit)")
    ap.add_argument("--no-csv", action="store_true", help="skip the CSV event export")
    return ap.parse_args(argv)


def load_stream(args):
    from loaders.stream import DocumentStream

    if args.lengths:
        from audit.lengths_file import read_lengths

        return DocumentStream.from_lengths(read_lengths(args.lengths, args.column), args.refill_docs,
                                           name=f"lengths:{Path(args.lengths).name}"), "lengths"
    if args.synthetic:
        from audit.synthetic import paper_like_lengths

        return DocumentStream.from_lengths(paper_like_lengths(), name="synthetic-paper-census"), "synthetic"
    from corpus.layout import Layout, default_data_dir
    from corpus.pretokenize import TokenShard

    lay = Layout(args.data_dir or default_data_dir(), args.source)
    names = lay.shard_names(args.split)
    lengths, refills = [], [0]
    for n in names:  # lengths only: the audit never touches tokens
        sh = TokenShard(lay.tokens, n)
        lengths.append(sh.lengths)
        refills.extend((refills[-1] + sh.refills[1:]).tolist())
    return DocumentStream(np.concatenate(lengths), refills, name=f"{args.source}:{args.split}"), args.source


def budget(args, stream, R):
    if args.updates is not None:
        return args.updates * TARGETS_PER_UPDATE, f"{args.updates} updates"
    if args.targets is not None:
        return args.targets, "--targets"
    if args.split == "val" and args.source == "climbmix":
        return OFFICIAL_TARGETS, "the official metric's 160 batches of 64 rows"
    if args.synthetic or args.source == "climbmix":
        return PAPER_TARGETS, "the paper's 953 updates"
    # scale: the same share of the corpus's tokens as the paper's budget, whole rows
    t = int(PAPER_TOKEN_FRACTION * int(stream.lengths.sum())) // (R - 1) * (R - 1)
    where = "this length file" if args.lengths else "the offline corpus"
    return t, f"scaled to {where}: {PAPER_TOKEN_FRACTION:.1%} of its {int(stream.lengths.sum()):,} tokens"


def write_events(rep, out: Path, csv: bool):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from corpus.atomic import atomic_write_bytes
    from loaders.core import KIND_NAMES

    ev = rep.events
    cols = {f: ev[f] for f in ev.dtype.names}
    table = pa.table(cols)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    atomic_write_bytes(out / f"events_{rep.packer}.parquet", sink.getvalue().to_pybytes())
    if csv:
        names = list(ev.dtype.names)
        arr = np.stack([ev[f].astype(np.int64) for f in names], axis=1)
        lines = [",".join(names)]
        kinds = np.asarray(KIND_NAMES)[ev["kind"]]
        body = "\n".join(",".join(map(str, r[:-2])) + f",{k},{r[-1]}" for r, k in zip(arr.tolist(), kinds))
        atomic_write_bytes(out / f"events_{rep.packer}.csv", ("\n".join(lines) + "\n" + body + "\n").encode())


def write_stream_lengths(stream, path):
    from corpus.atomic import atomic_write_text

    L = stream.lengths.tolist()
    r = stream.refills.tolist()
    atomic_write_text(path, "".join(" ".join(map(str, L[a:b])) + "\n" for a, b in zip(r[:-1], r[1:])))


def fmt(x):
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.4f}"
    return f"{x:,}"


def pct(x):
    return "n/a" if x is None else f"{100 * x:.2f}%"


def report_md(summary) -> str:
    per = summary["packers"]
    names = list(per)
    rows = [
        ("passes started (> 1: the stream wrapped)", "passes_started", fmt),
        ("sources arrived", "sources_arrived", fmt), ("tokens arrived", "tokens_arrived", fmt),
        ("BOS markers added", "bos_added", fmt), ("emitted", "emitted", fmt), ("discarded", "discarded", fmt),
        ("buffered", "buffered", fmt), ("partition adds up", "partition_holds", fmt),
        ("selection events", "selection_events", fmt), ("crop events", "crop_events", fmt),
        ("median crop emission", "crop_median_emitted", fmt), ("crops emitting only BOS", "crops_emitting_only_bos", fmt),
        ("sources started", "sources_started", fmt), ("sources fully emitted", "sources_fully_emitted", fmt),
        ("sources never started", "sources_never_started", fmt),
        ("sources > R arrived", "sources_longer_than_R_arrived", fmt),
        ("sources > R started", "sources_longer_than_R_started", fmt),
        ("startup delay (targets)", "startup_delay_targets", fmt),
        ("share of emitted from sources > R", "share_emitted_from_long_sources", pct),
    ]
    out = [f"# Source audit: {summary['stream']}", "",
           f"Budget: {summary['targets']:,} targets = {summary['rows']:,} rows of R={summary['row_capacity']} "
           f"({summary['budget_reason']}); buffer B={summary['buffer']}. "
           f"The trainer's final unused prefetch is excluded.", "",
           "## 5.1 Coverage at the budget", "",
           "| quantity | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, key, f in rows:
        out.append(f"| {label} | " + " | ".join(f(per[n][key]) for n in names) + " |")
    for label, key, f in (("protected sources", "size", fmt), ("protected tokens", "tokens", fmt),
                          ("protected share of arrived", "share_of_arrived", pct),
                          ("protected share of buffered", "share_of_buffered", pct),
                          ("Proposition held at every selection", "proposition_held", fmt)):
        out.append(f"| {label} | " + " | ".join(f(per[n]["protected"][key]) if per[n]["protected"]["applies"] else "n/a" for n in names) + " |")
    out += ["", "Segment-first pre-splits long sources, which removes the Proposition's hypothesis (section 3, Limits); "
            "it is not checked there. Paper (original packer): 999 protected sources, 4.37% of arrived source mass, "
            "99.83% of buffered mass; 1 pass.", ""]
    for n in names:
        v = per[n]["protected"].get("first_violation")
        if v:
            out.append(f"**{n}: Proposition violated** at event {v['event']} (source {v['source_id']}, length {v['source_len']}).")
    out += ["### Retention of loaded token mass by original length", "",
            "| stratum | sources | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for k, r in enumerate(per[names[0]]["retention_by_stratum"]):
        cells = [pct(per[n]["retention_by_stratum"][k]["retained"]) for n in names]
        out.append(f"| {r['stratum']} | {r['sources']:,} | " + " | ".join(cells) + " |")
    out += ["", "n/a: no source of that length arrived (0.00% means sources arrived and none of their tokens was emitted)."]
    if summary.get("permutations"):
        p = summary["permutations"]
        out += ["", "### Startup delay under arrival-order permutations (original packer)", "",
                f"{p['count']} seeded permutations (seeds {p['seeds'][0]}..{p['seeds'][-1]}): first emission of a source "
                f"longer than R at {fmt(p['min'])} – {fmt(p['max'])} targets (unpermuted: {fmt(p['unpermuted'])}). "
                f"Paper: 12.99–14.84 M targets."]
    out += ["", f"## 5.2 Repeated-corpus bounds at B = {summary['buffer']}", "",
            "| length at least | sources per pass | earliest possible pass |", "|---:|---:|---:|"]
    for r in summary["pass_bounds"]:
        out.append(f"| {r['length_at_least']:,} | {r['sources_per_pass']:,} | {fmt(r['earliest_possible_pass'])} |")
    out += ["", "Necessary lower bounds (section 3), not service times.", ""]
    if summary.get("regime"):
        out += regime_section(summary["regime"])
    out += ["## Figures", ""]
    from audit.plots import FIGURE_NOTES

    for f in summary["figures"]:
        out += [f"![{f}]({f})", "", FIGURE_NOTES.get(f, ""), ""]
    return "\n".join(out) + "\n"


def regime_section(reg) -> list:
    from audit.regime import regime_table_md

    cols = reg["columns"]
    out = ["## Regime: where this stream sits against the paper's scale", "",
           "The paper's effects depend on ratios, so a setting is in the paper's regime only where these indicators "
           "have the paper's order of magnitude.", "",
           regime_table_md(cols), ""]
    a = cols.get("this audit")
    if a and a["buffer"] - 1 > a["sources_longer_than_R_per_pass"]:
        out.append(f"**This audit is not in the paper's regime at B = {a['buffer']:,}:** the "
                   f"stream has {a['sources_per_pass']:,} sources per pass (paper {846_848:,}) and only "
                   f"{a['sources_longer_than_R_per_pass']:,} longer than R per pass, fewer than B - 1, so the protected set "
                   f"holds every long source of a pass ({a['passes_started']} pass(es) started within this budget; "
                   f"{pct(a['protected_share_of_arrived'])} of arrived tokens "
                   f"against the paper's 4.37%). The mechanism checks above (partition, Proposition, bounds) hold "
                   f"at any scale; the shares do not transfer."
                   + (" The tiny training setting is the scaled one that is in the regime." if "tiny training" in cols else ""))
        out.append("")
    return out


def check_args(args):
    """Every bad value refused in one line before anything is read or written."""
    if args.row_capacity < 2:
        raise DataError(f"--row-capacity {args.row_capacity}: R must be at least 2 (one input and one target)")
    if args.buffer < 1:
        raise DataError(f"--buffer {args.buffer}: B must be at least 1")
    if args.targets is not None and args.targets < 1:
        raise DataError(f"--targets {args.targets}: must be positive")
    if args.updates is not None and args.updates < 1:
        raise DataError(f"--updates {args.updates}: must be positive")
    if args.lengths and args.split != "train":
        raise DataError("--split applies to a prepared corpus, not to a --lengths file")
    if args.refill_docs < 1:
        raise DataError(f"--refill-docs {args.refill_docs}: must be at least 1")
    if args.column is not None and not (args.lengths or "").lower().endswith(".parquet"):
        raise DataError("--column applies to a --lengths .parquet file only")
    if args.permutations < 0:
        raise DataError(f"--permutations {args.permutations}: must be 0 or more")
    try:
        thr = [int(t) for t in args.thresholds.split(",") if t.strip()]
    except ValueError:
        raise DataError(f"--thresholds {args.thresholds!r}: expected comma-separated integers") from None
    if any(t < 1 for t in thr):
        raise DataError(f"--thresholds {args.thresholds!r}: thresholds must be positive")
    packers = list(PACKERS) if args.packers == "all" else [p.strip() for p in args.packers.split(",")]
    for p in packers:
        if p not in PACKERS:
            raise DataError(f"--packers: unknown packer {p!r} (choose from {', '.join(PACKERS)})")
    return packers, thr


def regime(stream, R, B, targets, main_rep, data_dir, synthetic):
    """Indicators of this audit's setting and, for the offline corpus, the tiny training preset."""
    from audit.regime import preset_setting, preset_stream, regime_indicators

    cols = {"this audit": regime_indicators(stream, R, B, targets, replay=main_rep)}
    if not synthetic and stream.name.startswith("stdlib:train"):
        from corpus.layout import default_data_dir
        from presets.six import PRESETS, TINY_REGIME

        dd = data_dir or default_data_dir()
        tiny = {**PRESETS["tiny"], **TINY_REGIME}
        tR, tB, tT = preset_setting(tiny)
        cols["tiny training"] = regime_indicators(preset_stream(dd, tiny), tR, tB, tT)
    return {"columns": cols}


def main(argv=None):
    args = parse_args(argv)
    from console.progress import bar as tqdm

    from audit import plots
    from audit.metrics import pass_bounds, summarize_replay
    from corpus.atomic import atomic_write_json, atomic_write_text
    from corpus.runlock import FolderLocked, lock_file

    out = Path(args.out)
    try:
        packers, thresholds = check_args(args)
        stream, label = load_stream(args)
        R, B = args.row_capacity, args.buffer
        targets, reason = budget(args, stream, R)
        rows = rows_for_targets(targets, R)
        if rows < 1:
            raise DataError(f"budget of {targets} targets is less than one row of {R - 1}")
        if out.exists() and not out.is_dir():
            raise DataError(f"--out {out}: is a file, not a folder")
        out.parent.mkdir(parents=True, exist_ok=True)
        stack = contextlib.ExitStack()
        stack.enter_context(lock_file(out.parent / f".{out.name}.lock", f"the audit output {out}"))
    except (DataError, ValueError, FolderLocked, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # everything is written into a fresh sibling folder and swapped in at the end, so a failed
    # audit leaves the previous complete output untouched, never a mix of old and new files
    import shutil
    import tempfile

    try:
        for stale in out.parent.glob(f".{out.name}.new-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a killed audit's partial output (we hold the lock)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
        work.chmod(0o755)  # mkdtemp makes 0700; the output folder gets the usual permissions
        print(f"audit of {stream.name}: {stream.n:,} sources per pass -> {out}")
        print(f"budget: {targets:,} targets = {rows:,} rows ({reason})")
        t0 = time.time()
        reps, summaries = [], {}
        for p in tqdm(packers, desc="replay", unit="packer"):
            rep = Replay(stream, p, rows, R, B)
            summaries[p] = summarize_replay(rep)
            write_events(rep, work, not args.no_csv)
            reps.append(rep)
        write_stream_lengths(stream, work / "stream_lengths.txt")
        summary = {"stream": stream.name, "source": label, "targets": targets, "rows": rows, "budget_reason": reason,
                   "row_capacity": R, "buffer": B, "packers": summaries}
        if args.permutations:
            seeds = list(range(args.permutations))
            delays = [first_long_emission(stream.permuted(s), R, B, max_rows=rows) for s in tqdm(seeds, desc="permutations")]
            got = [d for d in delays if d is not None]
            summary["permutations"] = {"count": len(seeds), "seeds": seeds, "delays": delays,
                                       "min": min(got) if got else None, "max": max(got) if got else None,
                                       "unpermuted": first_long_emission(stream, R, B, max_rows=rows)}
        thr = sorted({t for t in thresholds if t <= stream.lengths.max()} | {int(stream.lengths.max())})
        vals, counts = np.unique(stream.lengths, return_counts=True)
        summary["pass_bounds"] = pass_bounds(vals, counts, [t for t in thr if t > R], B)
        figs = ["retention_by_stratum.png", "sources_started.png", "buffer_mass.png", "length_histogram.png"]
        plots.retention_by_stratum(list(summaries.values()), work / figs[0])
        plots.sources_started(reps, work / figs[1])
        main_rep = next((r for r in reps if r.packer == "original"), reps[0])
        from audit.proposition import check_proposition

        _, ps, trace = check_proposition(main_rep.stream, main_rep.raw, main_rep.refill_log, B, R, mass_trace=True)
        plots.buffer_mass(main_rep, trace, work / figs[2])
        plots.length_histogram(main_rep, ps.members, work / figs[3])
        from findings import PAPER

        if summary.get("permutations"):
            figs.append("startup_delay.png")
            P1 = PAPER["s5_1_coverage"]
            plots.startup_delay(summary["permutations"], (P1["startup_delay_min_targets"], P1["startup_delay_max_targets"]),
                                work / figs[-1])
        figs.append("pass_bounds.png")
        plots.pass_bounds(summary["pass_bounds"], PAPER["s5_2_pass_bounds"], B, work / figs[-1])
        summary["figures"] = figs
        if main_rep.packer == "original":
            summary["regime"] = regime(stream, R, B, targets, main_rep, args.data_dir, args.synthetic)
            atomic_write_json(work / "regime.json", summary["regime"])
        summary["seconds"] = round(time.time() - t0, 2)
        atomic_write_json(work / "summary.json", summary)
        atomic_write_text(work / "report.md", report_md(summary))
        old = out.parent / f".{out.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            os.replace(out, old)
        os.replace(work, out)
        shutil.rmtree(old, ignore_errors=True)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if "work" in locals() and work.exists():
            shutil.rmtree(work, ignore_errors=True)
        stack.close()  # releases the lock
    md = report_md(summary)
    print(md.split("### Retention")[0])
    if "## Regime" in md:
        print("## Regime" + md.split("## Regime")[1].split("## Figures")[0])
    print(f"wrote {out}/summary.json, report.md, regime.json, events_*.parquet, {len(summary['figures'])} figures "
          f"({summary['seconds']}s)")
    bad = [p for p, s in summaries.items() if not s["partition_holds"] or s["protected"]["proposition_held"] is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
