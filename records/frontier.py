"""The frontier (frontier.json, schema "audit-frontier/2"): every configuration of a --sweep replayed to one
budget, its crop waste, long documents never started (and their arrivals) and their last tenth's exposure, the
Pareto set and the cheapest listed change that starts every long document. Version 2: the never-started counts
are documents (version 1 counted arrivals, a document once per pass), arrivals kept apart. audit/sweep.py writes
it through this record; the findings page reads it."""
from dataclasses import dataclass

from records.json_record import StageFile, check_schema, picked

SCHEMA = "audit-frontier/2"
FILE = "frontier.json"


@dataclass(frozen=True)
class FrontierPoint:
    """One configuration's point (audit/sweep.py measure; the file's point holds more)."""
    row_capacity: int
    buffer: int
    packer: str
    ranks: int
    crop_waste: float
    long_documents: int  # documents longer than the reference length that arrived by the horizon
    long_documents_never_started: int  # of those, the documents no arrival of which was started
    long_arrivals: int  # their arrivals (a document once in each pass the stream wraps into)
    long_arrivals_never_started: int
    last_tenth_exposure: float | None
    current: bool  # the command line's configuration
    paper: bool  # the paper's


@dataclass(frozen=True)
class Frontier(StageFile):
    """frontier.json as one record; `values` is the file's content, key for key."""
    FILE, SCHEMA, WHAT = FILE, SCHEMA, "the frontier"
    values: dict
    targets: int
    reference_length: int  # long documents: longer than this (the command line's R, for every configuration)
    long_documents_in_stream: int
    points: list  # [FrontierPoint]
    pareto: list  # indices of the points no other one beats on all three measures
    cheapest_change: str

    @classmethod
    def from_json(cls, d, where=FILE) -> "Frontier":
        check_schema(d, where, SCHEMA)
        top = picked(_FrontierFile, d, where)
        return cls(d, top.targets, top.reference_length, top.long_documents_in_stream,
                   [picked(FrontierPoint, p, f"{where}: points[{i}]") for i, p in enumerate(top.points)],
                   top.pareto, top.cheapest_change)


@dataclass(frozen=True)
class _FrontierFile:
    targets: int
    reference_length: int
    long_documents_in_stream: int
    points: list
    pareto: list
    cheapest_change: str
