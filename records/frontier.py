"""The frontier (frontier.json, schema "audit-frontier/1"): every configuration of a --sweep replayed to one
budget, its crop waste, long sources never started and their last tenth's exposure, the Pareto set and the
cheapest listed change that starts every long source. audit/sweep.py writes it through this record; the findings
page reads it."""
from dataclasses import dataclass

from records.json_record import StageFile, check_schema, picked

SCHEMA = "audit-frontier/1"
FILE = "frontier.json"


@dataclass(frozen=True)
class FrontierPoint:
    """One configuration's point (audit/sweep.py measure; the file's point holds more)."""
    row_capacity: int
    buffer: int
    packer: str
    ranks: int
    crop_waste: float
    long_arrived: int
    long_never_started: int
    last_tenth_exposure: float | None
    current: bool  # the command line's configuration
    paper: bool  # the paper's


@dataclass(frozen=True)
class Frontier(StageFile):
    """frontier.json as one record; `values` is the file's content, key for key."""
    FILE, SCHEMA, WHAT = FILE, SCHEMA, "the frontier"
    values: dict
    targets: int
    reference_length: int  # long sources: longer than this (the command line's R, for every configuration)
    points: list  # [FrontierPoint]
    pareto: list  # indices of the points no other one beats on all three measures
    cheapest_change: str

    @classmethod
    def from_json(cls, d, where=FILE) -> "Frontier":
        check_schema(d, where, SCHEMA)
        top = picked(_FrontierFile, d, where)
        return cls(d, top.targets, top.reference_length,
                   [picked(FrontierPoint, p, f"{where}: points[{i}]") for i, p in enumerate(top.points)],
                   top.pareto, top.cheapest_change)


@dataclass(frozen=True)
class _FrontierFile:
    targets: int
    reference_length: int
    points: list
    pareto: list
    cheapest_change: str
