"""The audit's plan: what `python -m audit` was asked to do, built once from its parsed arguments (plan_of) and
checked there, each bad value refused in one line before anything is read or written. A --pipeline preset's
packer, split and refill are filled in here, and the topology the audit runs (N ranks x M loader workers, each
with a packer of its own, or one packer for the run) is decided here once. Nothing after this reads the
argparse Namespace, and nothing writes into it."""
from dataclasses import dataclass
from pathlib import Path

from audit.adapters import SPECS, installed, user_spec
from audit.libraries.args import loader_settings
from audit.loader_presets import Pipeline, apply_pipeline
from audit.pipeline import check_packers
from audit.replay import TARGETS_PER_UPDATE
from audit.topology import Split, parse_split, worker_streams
from corpus.readers.sources import FORMATS
from errors import DataError
from loaders.core import PACKERS

PERMUTATIONS = 20  # --permutations left out (its --help says so)
THRESHOLDS = "16384,32768,65536,131072"  # --thresholds left out (its --help says so)
SWEEP_KEYS = ("buffer", "packer", "row_capacity", "ranks")  # what --sweep KEY=V1,V2,... may vary (audit/sweep.py)


@dataclass(frozen=True)
class CorpusReading:
    """--corpus: the files, folders or globs in the order given, how they are read (corpus/readers), and where
    their lengths are cached."""
    paths: tuple
    format: str | None
    column: str | None  # the text or token column
    label_column: str | None
    tokenizer: str | None
    bos: str  # auto | add | none
    bos_id: int | None
    separator: int | None
    token_dtype: str | None
    cache_dir: str  # --cache-dir, else OUT.lengths beside --out


@dataclass(frozen=True)
class StreamChoice:
    """Where the stream comes from, and how it is read: refilled refill_docs documents at a time (where the input
    does not say its own refills), for at most `passes` passes (None: it wraps), no document over max_length."""
    kind: str  # prepared | synthetic | lengths | corpus
    source: str  # the prepared corpus (--source: stdlib | climbmix | parquet), read when kind is prepared
    split: str  # train | val
    data_dir: str | None
    lengths: str | None  # --lengths FILE
    column: str | None  # a --lengths .parquet file's length column
    label_column: str | None
    corpus: CorpusReading | None
    refill_docs: int
    passes: int | None
    max_length: int

    @property
    def prepared(self) -> str | None:
        """The prepared corpus read (stdlib, climbmix, parquet), or None for any other input."""
        return self.source if self.kind == "prepared" else None


@dataclass(frozen=True)
class LoaderTopology:
    """The loader the audit stands for: N ranks x M DataLoader workers (as given), of which streams_ranks x
    streams_workers run a packer and a buffer of their own (1 x 1 where one packer serves the run), each over
    its share of the documents (split: split_by parsed, audit/topology.py Split)."""
    ranks: int
    loader_workers: int
    streams_ranks: int
    streams_workers: int
    split_by: str
    split: Split
    refill_docs: int  # each worker stream's share refilled this many documents at a time

    @property
    def worker_streams(self) -> int:
        return worker_streams(self.streams_ranks, self.streams_workers)


@dataclass(frozen=True)
class EngineChoice:
    """Where the fan-outs run (fanout/): --engine, --workers, --ray-address, --verbose."""
    name: str  # local | ray
    workers: int | None  # local processes (None: the default of each use)
    ray_address: str | None
    verbose: bool


@dataclass(frozen=True)
class AuditPlan:
    stream: StreamChoice
    packers: tuple  # checked: each known and installed; the traced packer of --trace last
    packers_arg: str  # --packers as given, or as the preset fills it in ('all' where left out)
    user: object  # the --trace packer (an adapters.Spec), or None
    loader_args: dict  # --loader-arg values, parsed and checked against the packers
    pipeline_name: str | None  # --pipeline NAME
    pipeline: Pipeline | None  # its preset
    topology: LoaderTopology
    row_capacity: int  # R
    buffer: int  # B
    updates: int | None
    targets: int | None
    permutations: int
    thresholds: tuple  # the repeated-corpus table's length thresholds
    engine: EngineChoice
    out: str  # --out as given
    figures: bool
    csv: bool
    fates: bool
    sweep: dict | None  # the frontier's grid ({key: [values]}), or None: one audit
    left_out: dict  # {packer: why} a caller chose not to run (the main job's comparison)

    @property
    def runs_permutations(self) -> bool:
        """The arrival-order permutations run (a fan-out) when asked for and the paper's own packer is audited."""
        return bool(self.permutations) and "original" in self.packers

    @property
    def runs_worker_streams(self) -> bool:
        """The topology's worker streams run (a fan-out) when there is more than one."""
        return self.topology.worker_streams > 1


def plan_of(args, left_out=None) -> AuditPlan:
    """The plan of the parsed command line: every bad value refused in one line (a --sweep's grid first), before
    anything is read or written."""
    grid = parse_sweeps(args.sweep) if args.sweep else None
    if grid:
        check_sweep_flags(args)
    loader = apply_pipeline(args.pipeline, args.packers, args.split_by, args.refill_docs, args.loader_workers,
                            args.ranks)
    if grid:
        check_sweep_packer(loader.packers, args.packers is None and args.pipeline)
        if "ranks" in grid and loader.owner == "stream":  # every point would be the same one packer
            raise DataError(f"--sweep ranks: --pipeline {args.pipeline} runs one packer for the whole run, whatever "
                            "its ranks; leave ranks out of the sweep")
    check_numbers(args)
    if not grid:  # a frontier keeps its budget in whole rows of each R it replays
        check_whole_rows(args)
    check_stream_flags(args)
    thresholds = parse_thresholds(args.thresholds or THRESHOLDS)
    split = parse_split(loader.split_by)
    user = user_spec(args.trace, trace_args(args.trace_arg)) if args.trace else None
    names = {"all": list(PACKERS), "every": list(PACKERS) + [n for n, s in SPECS.items() if installed(s)]}.get(
        loader.packers, [p.strip() for p in loader.packers.split(",") if p.strip()])
    if user is not None and user.name not in names:
        names.append(user.name)
    loader_args = loader_settings(args.loader_arg, names, args.row_capacity, loader.preset, args.ranks)
    packers = check_packers(names, user)
    streams_ranks, streams_workers = loader.streams(args.ranks, args.loader_workers)
    return AuditPlan(
        stream=stream_choice(args, loader), packers=tuple(packers), packers_arg=loader.packers,
        user=user, loader_args=loader_args, pipeline_name=args.pipeline, pipeline=loader.preset,
        topology=LoaderTopology(args.ranks, args.loader_workers, streams_ranks, streams_workers, loader.split_by,
                                split.for_ranks(streams_ranks), loader.refill_docs),
        row_capacity=args.row_capacity, buffer=args.buffer, updates=args.updates, targets=args.targets,
        permutations=PERMUTATIONS if args.permutations is None else args.permutations, thresholds=tuple(thresholds),
        engine=EngineChoice(args.engine, args.workers, args.ray_address, args.verbose), out=args.out,
        figures=not args.no_figures, csv=bool(args.csv), fates=not args.no_fates, sweep=grid,
        left_out=dict(left_out or {}))


def stream_choice(args, loader) -> StreamChoice:
    """The stream the command line asks for; a --corpus's BOS policy --bos, else the --pipeline preset's, else auto."""
    kind = "corpus" if args.corpus else "lengths" if args.lengths else "synthetic" if args.synthetic else "prepared"
    bos = args.bos or getattr(loader.preset, "bos", "") or "auto"
    corpus = None if not args.corpus else CorpusReading(
        tuple(args.corpus), args.format, args.column, args.label_column, args.tokenizer, bos, args.bos_id,
        args.separator, args.token_dtype, args.cache_dir or f"{Path(args.out)}.lengths")
    return StreamChoice(kind, args.source, args.split, args.data_dir, args.lengths, args.column, args.label_column,
                        corpus, loader.refill_docs, args.passes, args.max_length)


def check_numbers(args):
    """Each number in its range, one line naming the flag."""
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


def check_whole_rows(args):
    """A budget given as --targets or --updates is a whole number of rows of R - 1 targets (the replay packs rows),
    refused in one line naming the flag and the two nearest budgets that are, before the stream is read."""
    R = args.row_capacity
    if args.updates is not None:
        targets = args.updates * TARGETS_PER_UPDATE
        flag = f"--updates {args.updates} ({targets:,} targets)"
    elif args.targets is not None:
        targets, flag = args.targets, f"--targets {args.targets}"
    else:
        return
    if targets % (R - 1):
        below, above = targets // (R - 1) * (R - 1), (targets // (R - 1) + 1) * (R - 1)
        give = f"{below} or {above}" if below else f"{above}"  # under one row: one row, said once
        raise DataError(f"{flag}: not a whole number of rows of {R - 1:,} targets (--row-capacity {R}); give "
                        f"--targets {give}")


def check_stream_flags(args):
    """The flags of one kind of input given only with it."""
    corpus_only = [f for f, v in (("--tokenizer", args.tokenizer), ("--bos-id", args.bos_id), ("--format", args.format),
                                  ("--separator", args.separator), ("--token-dtype", args.token_dtype),
                                  ("--cache-dir", args.cache_dir), ("--bos", args.bos))
                   if v is not None]
    if corpus_only and not args.corpus:
        raise DataError(f"{corpus_only[0]} applies to --corpus (your corpus where it lives) only")
    if args.format is not None and args.format not in FORMATS:  # the reader's own line would not name the flag
        raise DataError(f"--format {args.format}: expected one of {', '.join(FORMATS)}")
    if (args.lengths or args.corpus) and args.split != "train":
        raise DataError("--split applies to a prepared corpus, not to a --lengths file")
    if args.column is not None and not (args.corpus or (args.lengths or "").lower().endswith(".parquet")):
        raise DataError("--column applies to a --lengths .parquet file or to --corpus only")


def parse_thresholds(text) -> list:
    try:
        thr = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise DataError(f"--thresholds {text!r}: expected comma-separated integers") from None
    if any(t < 1 for t in thr):
        raise DataError(f"--thresholds {text!r}: thresholds must be positive")
    return thr


# --trace-arg values that are Python's constants, not text: flag=False arrived as the text 'False', which is true
CONSTANTS = {"True": True, "False": False, "None": None}


def trace_args(pairs) -> dict:
    """--trace-arg K=V pairs, each value True, False or None as written, else an int, else a float, else the text."""
    out = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise DataError(f"--trace-arg {kv!r}: expected KEY=VALUE")
        if k in out:  # the later would silently win
            raise DataError(f"--trace-arg {k}: given twice; give it once")
        if v in CONSTANTS:
            out[k] = CONSTANTS[v]
            continue
        for cast in (int, float):
            try:
                v = cast(v)
                break
            except ValueError:
                pass
        out[k] = v
    return out


def check_sweep_flags(args):
    """A flag the frontier does not use, refused rather than ignored: it replays the paper's packers in this process,
    each configuration to the whole budget with the stream wrapping (a configuration whose stream ended first would
    be compared at fewer rows), and writes frontier.md, .json and .png (not the figure with --no-figures), with no
    events, fate tables or traced packer."""
    unused = [flag for flag, given in (("--csv", args.csv), ("--no-fates", args.no_fates), ("--trace", args.trace),
                                       ("--engine ray", args.engine != "local"), ("--passes", args.passes is not None),
                                       ("--permutations", bool(args.permutations)),  # 0 asks for nothing it ignores
                                       ("--thresholds", args.thresholds is not None),
                                       ("--ray-address", args.ray_address is not None))
              if given]
    if unused:
        them = "it" if len(unused) == 1 else "them"
        raise DataError(f"--sweep: {', '.join(unused)} not used by the frontier (it replays the paper's packers here, "
                        f"each to the whole budget with the stream wrapping, and writes frontier.md, .json and .png); "
                        f"leave {them} out")


def check_sweep_packer(packers, pipeline):
    """The frontier's current configuration has one packer, the command line's, and replays only the paper's: a
    --packers (or a --pipeline's packer) that names another, or several, is refused rather than replaced by
    'original' without a word. `all` (the default) leaves the current packer the paper's, original."""
    if packers == "all":
        return
    names = [p.strip() for p in packers.split(",") if p.strip()]
    given = f"--pipeline {pipeline} (its packer {packers})" if pipeline else f"--packers {packers}"
    others = [p for p in names if p not in PACKERS]
    if others:
        raise DataError(f"--sweep: {given}: the frontier replays the paper's packers ({', '.join(PACKERS)}), not "
                        f"{', '.join(others)}; audit {'it' if len(others) == 1 else 'them'} without --sweep, or name "
                        f"one of the paper's")
    if len(names) > 1:
        raise DataError(f"--sweep: {given}: the frontier's current configuration has one packer; list several as "
                        f"--sweep packer={','.join(names)} (and name the current one alone in --packers)")


def parse_sweeps(items) -> dict:
    """['buffer=1,10', 'packer=original'] -> {"buffer": [1, 10], "packer": ["original"]}, or one DataError line."""
    grid = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in SWEEP_KEYS:
            raise DataError(f"--sweep {item!r}: expected KEY=V1,V2,... with KEY one of {', '.join(SWEEP_KEYS)}")
        if key in grid:
            raise DataError(f"--sweep {key}: given twice; list every value once (--sweep {key}=A,B,...)")
        values = [v.strip() for v in text.split(",")]
        if values == [""]:
            raise DataError(f"--sweep {key}=: no values; list at least one (--sweep {key}=A,B,...)")
        if "" in values:  # buffer=1,,10: a value lost in typing, not a list of two
            raise DataError(f"--sweep {key}={text}: an empty value between commas; list each value once")
        grid[key] = [_sweep_value(key, v) for v in values]
        if len(set(grid[key])) < len(grid[key]):
            raise DataError(f"--sweep {key}={text}: a value listed twice")
    return grid


def _sweep_value(key, v):
    if key == "packer":
        if v not in PACKERS:
            raise DataError(f"--sweep packer={v}: the frontier replays the paper's packers ({', '.join(PACKERS)})")
        return v
    lowest = {"buffer": 1, "row_capacity": 2, "ranks": 1}[key]
    try:
        n = int(v)
    except ValueError:
        raise DataError(f"--sweep {key}={v}: expected integers") from None
    if n < lowest:
        raise DataError(f"--sweep {key}={v}: {'B' if key == 'buffer' else key} must be at least {lowest}")
    return n
