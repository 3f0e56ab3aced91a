"""A queue run's summary (queue_summary.json): what it accepted, rejected and quarantined, what it spent, the
scores after its final decay, and the roles of the shards a reader asks about (a harmful shard caught, a
recovery that a harmful shard confounded), so that nothing downstream tells a shard's role from its id.
shardqueue/runs.py writes it from the run's decision log; the findings page and the study read it."""
from dataclasses import asdict, dataclass, field
from pathlib import Path

from corpus.atomic import atomic_write_json
from records.json_record import from_mapping, read_json

SCHEMA = "queue-run/1"
# the calibration record's keys a summary repeats: the rule (k, frac, sigma_d) and its false-rejection rate
CALIBRATION_KEYS = ("k", "frac", "sigma", "false_rejections", "transitions", "upper95", "rate_kind")


@dataclass(frozen=True)
class RunSummary:
    policy: str  # queue, plain or random
    seed: int
    reject_rate: float
    run_id: str
    accepted: list  # shard ids, in the order they were accepted
    quarantined: list
    deferred_pending: list  # sent to a later rotation and not decided since
    undecided: list
    rejections: dict  # {shard: rejections}
    returns: dict  # {shard: returns from quarantine}
    rotations: int
    accepted_tokens: int
    spent: dict  # {"updates", "targets", "seconds"} of all training, wasted included
    final: dict | None  # {"official", "control", "selection"} after the final decay
    start_losses: dict  # the control losses of the start state
    calibration: dict  # CALIBRATION_KEYS of the calibration the run was judged under
    curve: list  # per trained shard: {"shard", "role", "history_targets", "spent_targets", "losses"}
    screen: dict  # the forward-only screen against the decisions (checks/report.py screen_agreement)
    accepted_records_targets: int
    harmful_accepted: list  # harmful shards that ended accepted without a return
    harmful_quarantined: list  # harmful shards that ended in quarantine
    # (quarantined shard, its recovery shard) where the recovery shard was harmful and the shard was not
    confounded_recoveries: list
    schema: str = field(default=SCHEMA)

    def to_json(self) -> dict:
        return asdict(self)

    def write(self, path):
        atomic_write_json(path, self.to_json())

    @classmethod
    def from_json(cls, d, where="queue_summary.json") -> "RunSummary":
        return from_mapping(cls, d, where, SCHEMA)

    @classmethod
    def load(cls, path) -> "RunSummary | None":
        """The summary in path; None when there is none (the run did not finish, or never ran)."""
        d = read_json(path)
        return None if d is None else cls.from_json(d, str(Path(path)))
