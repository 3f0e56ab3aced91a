"""An audit's summary (summary.json, schema "audit-summary/1"): each packer's audit at the horizon (PackerSummary:
the mass partition, the sources started, the Proposition's protected set), the permutations, the pass bounds, the
regime indicators and, under a loader topology, each worker stream's counts and their merge (TopologySummary).
The file holds more (the report's tables, the corpus, the figures): the whole of it is kept in `values`, typed
where its readers look. audit/run.py writes it through this record; the findings page reads it."""
from dataclasses import dataclass, replace

from errors import DataError
from records.json_record import StageFile, check_schema, picked

SCHEMA = "audit-summary/1"
FILE = "summary.json"


@dataclass(frozen=True)
class Protected:
    """The Proposition's protected set at the horizon: the B - 1 longest long sources that arrived."""
    size: int
    tokens: int
    share_of_arrived: float
    share_of_buffered: float
    proposition_held: bool | None  # None where it does not apply
    applies: bool
    all_buffered_unstarted: bool | None = None  # written where the Proposition applies


@dataclass(frozen=True)
class PackerSummary:
    """One packer's audit at the horizon (audit/compute.py finish)."""
    packer: str
    sources_arrived: int
    tokens_arrived: int
    bos_added: int
    emitted: int
    discarded: int
    buffered: int
    partition_holds: bool  # arrived (and added markers) = emitted + discarded + buffered, nothing overdrawn
    crop_events: int
    crop_median_emitted: float | None  # None: no crop event
    crops_emitting_only_bos: int
    sources_longer_than_R_arrived: int
    sources_longer_than_R_started: int
    share_emitted_from_long_sources: float
    startup_delay_targets: int | None  # the first emission of a source longer than R, None within no budget
    protected: Protected
    passes_started: int | None = None  # a traced loader that builds no index of its epochs has none

    @property
    def long_never_started(self) -> int:
        return self.sources_longer_than_R_arrived - self.sources_longer_than_R_started


@dataclass(frozen=True)
class StreamCounts:
    """One worker stream's counts of one packer, or their merge over the worker streams (audit/topology.py)."""
    sources_arrived: int
    sources_never_started: int
    sources_longer_than_R_arrived: int
    sources_longer_than_R_started: int
    partition_holds: bool
    proposition_held: bool | None

    @property
    def long_never_started(self) -> int:
        return self.sources_longer_than_R_arrived - self.sources_longer_than_R_started


@dataclass(frozen=True)
class TopologyPacker:
    """One packer under the topology: each worker stream's counts and their merge; `refused` where a worker
    stream's packer refused its share (the packer is then not merged)."""
    workers: list  # [StreamCounts | None], None for a refused share
    merged: StreamCounts | None
    refused: str | None


@dataclass(frozen=True)
class TopologySummary:
    """N ranks x M loader workers, each of the worker streams a packer of its own over its share."""
    ranks: int
    loader_workers: int
    worker_streams: int
    split_by: str
    refill_docs: int
    packers: dict  # {name: TopologyPacker}

    @classmethod
    def from_json(cls, d, where) -> "TopologySummary":
        t = picked(_TopologyFile, d, where)
        return cls(t.ranks, t.loader_workers, t.worker_streams, t.split_by, t.refill_docs,
                   {n: _topology_packer(p, f"{where}: {n}") for n, p in t.packers.items()})


@dataclass(frozen=True)
class _TopologyFile:
    ranks: int
    loader_workers: int
    worker_streams: int
    split_by: str
    refill_docs: int
    packers: dict


@dataclass(frozen=True)
class _TopologyPackerFile:
    workers: list
    merged: dict


def _counts(c, where):
    return None if isinstance(c, dict) and "refused" in c else picked(StreamCounts, c, where)


def _topology_packer(p, where):
    t = picked(_TopologyPackerFile, p, where)
    return TopologyPacker([_counts(c, f"{where}: worker stream {w}") for w, c in enumerate(t.workers)],
                          _counts(t.merged, f"{where}: merged"), t.merged.get("refused"))


@dataclass(frozen=True)
class Permutations:
    """The first long emission under seeded arrival-order permutations (targets)."""
    count: int
    min: int | None
    max: int | None


@dataclass(frozen=True)
class PassBound:
    """The repeated-corpus bound: a source this long cannot start before this pass."""
    length_at_least: int
    sources_per_pass: int
    earliest_possible_pass: int


@dataclass(frozen=True)
class RegimeIndicators:
    """What the findings page shows of a setting's regime indicators (audit/regime.py); None: not given."""
    longest_chunks_share_of_B: float | None = None
    protected_share_of_arrived: float | None = None
    passes_started: int | None = None
    arrived_over_B: float | None = None
    share_emitted_from_long_sources: float | None = None


@dataclass(frozen=True)
class AuditSummary(StageFile):
    """summary.json as one record; `values` is the file's content, key for key."""
    FILE, SCHEMA, WHAT = FILE, SCHEMA, "the audit's summary"
    values: dict
    targets: int
    row_capacity: int
    buffer: int
    packers: dict  # {name: PackerSummary} of the packers that ran
    refused: dict  # {name: why} of those that refused the stream (a library's finding, not a crash)
    permutations: Permutations | None
    pass_bounds: list  # [PassBound]
    regime: dict | None  # {column: RegimeIndicators}: this audit's setting, and for the offline corpus the tiny preset's
    topology: TopologySummary | None

    @classmethod
    def from_json(cls, d, where=FILE) -> "AuditSummary":
        check_schema(d, where, SCHEMA)
        top = picked(_SummaryFile, d, where)
        ran = {n: s for n, s in top.packers.items() if "refused" not in s}
        perm = d.get("permutations")
        return cls(
            d, top.targets, top.row_capacity, top.buffer,
            {n: _packer(s, f"{where}: packers.{n}") for n, s in ran.items()},
            {n: s["refused"] for n, s in top.packers.items() if "refused" in s},
            None if not perm else picked(Permutations, perm, f"{where}: permutations"),
            [picked(PassBound, b, f"{where}: pass_bounds") for b in d.get("pass_bounds") or []],
            None if not d.get("regime") else {n: picked(RegimeIndicators, c, f"{where}: regime.{n}")
                                              for n, c in _regime_columns(d["regime"], where).items()},
            None if not d.get("topology") else TopologySummary.from_json(d["topology"], f"{where}: topology"))


@dataclass(frozen=True)
class _SummaryFile:
    targets: int
    row_capacity: int
    buffer: int
    packers: dict


def _regime_columns(regime, where):
    """summary.json's regime: {"columns": {column: indicators}}; else one line."""
    cols = regime.get("columns") if isinstance(regime, dict) else None
    if not isinstance(cols, dict):
        raise DataError(f"{where}: regime has no columns object")
    return cols


def _packer(s, where):
    p = picked(PackerSummary, s, where)
    return replace(p, protected=picked(Protected, p.protected, f"{where}: protected"))
