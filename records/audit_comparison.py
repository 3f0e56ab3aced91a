"""One audit's table across packers (comparison.json, schema "audit-comparison/1"): each packer's row at one
budget (shares of the arrived tokens, sources never started, the long sources' first and last tenth exposed, the
Proposition), who refused the stream, who was left out, and the sentence. audit/compare.py computes it,
audit/run.py writes it through this record; the findings page and compare.headline read it."""
from dataclasses import dataclass

from records.json_record import StageFile, check_schema, picked

SCHEMA = "audit-comparison/1"
FILE = "comparison.json"


@dataclass(frozen=True)
class ComparisonRow:
    """One packer's row (audit/compare.py packer_row; the file's row holds more)."""
    how: str  # replayed, traced, or a rule's whole line (whose code it is from)
    rows: int  # rows made
    budget_rows: int  # rows asked for
    budget_reached: bool
    emitted_share: float
    discarded_share: float
    buffered_share: float
    padding_share: float
    sources_never_started: int
    long_arrived: int
    long_never_started: int
    long_first_tenth_exposed: float | None
    long_last_tenth_exposed: float | None
    least_represented_label: list | None  # [label, representation]
    continuation_rows: int
    proposition: str  # held, VIOLATED, or n/a and why
    # documents, each counted once (None: the packer has no fate table, or a file written before they were kept)
    long_documents_never_started: int | None = None
    long_documents_arrived: int | None = None
    row_capacity: int | None = None  # the packer's own R (a library may pack to one token less); None: an older file
    empty_share: float | None = None  # the rows' capacity that holds no token (None: not seen, or an older file)

    def long_unstarted(self) -> str:
        """Sources longer than R never started, in documents where counted, else in arrivals."""
        if self.long_documents_never_started is not None and self.long_documents_arrived is not None:
            return f"{self.long_documents_never_started:,} of {self.long_documents_arrived:,} documents"
        return f"{self.long_never_started:,} of {self.long_arrived:,} arrivals"


@dataclass(frozen=True)
class Comparison(StageFile):
    """comparison.json as one record; `values` is the file's content, key for key."""
    FILE, SCHEMA, WHAT = FILE, SCHEMA, "the audit's comparison"
    values: dict
    targets: int
    row_capacity: int
    buffer: int
    passes: float
    packers: dict  # {name: ComparisonRow}
    refused: dict  # {name: why}
    left_out: dict  # {name: why}: packers a caller chose not to run
    sentence: str

    @classmethod
    def from_json(cls, d, where=FILE) -> "Comparison":
        check_schema(d, where, SCHEMA)
        top = picked(_ComparisonFile, d, where)
        return cls(d, top.targets, top.row_capacity, top.buffer, top.passes,
                   {n: picked(ComparisonRow, r, f"{where}: packers.{n}") for n, r in top.packers.items()},
                   top.refused, top.left_out, top.sentence)


@dataclass(frozen=True)
class _ComparisonFile:
    targets: int
    row_capacity: int
    buffer: int
    passes: float
    packers: dict
    refused: dict
    left_out: dict
    sentence: str
