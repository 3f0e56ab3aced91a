"""What `reconstruct --execute` found (reexecution.json in the run folder for the whole log, reexecution_partial.json
for a stretch of it): whether every re-executed record agreed with the log, how it was compared, and the first
difference when one did not.
shardqueue/checks/reexecute.py writes it; the main job and the findings page read it."""
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from corpus.atomic import atomic_write_json
from records.json_record import from_mapping, read_json

SCHEMA = "queue-reexecution/1"
FILE = "reexecution.json"  # the whole log's
PARTIAL_FILE = "reexecution_partial.json"  # a stretch of it (--to-record, --from-checkpoint): never the whole's verdict


@dataclass(frozen=True)
class Difference:
    """The first record that re-executed differently: where, and both values."""
    seq: int
    event: str
    field: str
    logged: object
    made: object
    line: str  # all of it in one line


@dataclass(frozen=True)
class Reexecution:
    held: bool  # every re-executed record agreed with the log
    mode: str  # "bitwise", or the tolerance and what was not compared
    tolerance: float
    same_machine: bool
    parameter_hashes_compared: bool
    first: int  # the stretch re-executed: records first..last of the log
    last: int
    records: int
    from_checkpoint: str | None
    seconds: float
    largest_float_difference: dict  # {"value", "record", "field"}
    difference: Difference | None  # the first
    schema: str = field(default=SCHEMA)
    whole_log: bool | None = None  # records first..last are the whole log (None: a file written before this was kept)

    @property
    def file_name(self):
        return FILE if self.whole_log else PARTIAL_FILE

    @property
    def held_for_the_whole_log(self):
        """What the main job skips on: a stretch that held, or an older file that does not say, is not enough."""
        return self.held and self.whole_log is True

    def write(self, folder):
        atomic_write_json(Path(folder) / self.file_name, asdict(self))

    @classmethod
    def load(cls, folder) -> "Reexecution | None":
        where = str(Path(folder) / FILE)
        d = read_json(Path(folder) / FILE)
        if d is None:
            return None
        if isinstance(d, dict):  # a file written before whole_log was kept reads as one that does not say
            d = {"whole_log": None, **d}
        rx = from_mapping(cls, d, where, SCHEMA)
        return rx if rx.difference is None else replace(rx, difference=from_mapping(Difference, rx.difference, where))
