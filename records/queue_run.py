"""A queue run's summary (queue_summary.json): what it accepted, rejected and quarantined, what it spent, the
scores after its final decay, and the roles of the shards a reader asks about (a harmful shard caught, a
recovery that a harmful shard confounded), so that nothing downstream tells a shard's role from its id.
shardqueue/runs.py writes it from the run's decision log; the findings page and the study read it."""
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from corpus.atomic import atomic_write_json
from records.json_record import from_mapping, read_json

SCHEMA = "queue-run/1"


@dataclass(frozen=True)
class RuleCalibration:
    """The calibration the run was judged under: the rule (k, frac, sigma_d) and its false-rejection rate."""
    k: float | None
    frac: float | None
    sigma: dict | None  # {domain: sigma_d}
    false_rejections: int | None
    transitions: int | None
    upper95: float | None  # the rate's one-sided 95% Clopper-Pearson bound
    rate_kind: str  # held-out, or in-sample (measured on the transitions that chose k and frac)

    @property
    def in_sample(self) -> bool:
        return self.rate_kind == "in-sample"


@dataclass(frozen=True)
class ScreenAgreement:
    """How well the forward-only screen predicts the training-based decision, over the candidate shards."""
    n: int
    spearman_screen_vs_rise: float | None
    auc_screen_flagged: float | None
    flagged: int
    caveat: str


@dataclass(frozen=True)
class Scores:
    """A model's official BPB and its BPB on each control and selection domain."""
    official: float
    control: dict
    selection: dict


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
    final: Scores | None  # after the final decay
    start_losses: dict  # the control losses of the start state
    calibration: RuleCalibration
    curve: list  # per trained shard: {"shard", "role", "history_targets", "spent_targets", "losses"}
    screen: ScreenAgreement
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
        s = from_mapping(cls, d, where, SCHEMA)
        return replace(s, calibration=from_mapping(RuleCalibration, s.calibration, f"{where}: calibration"),
                       screen=from_mapping(ScreenAgreement, s.screen, f"{where}: screen"),
                       final=None if s.final is None else from_mapping(Scores, s.final, f"{where}: final"))

    @classmethod
    def load(cls, path) -> "RunSummary | None":
        """The summary in path; None when there is none (the run did not finish, or never ran)."""
        d = read_json(path)
        return None if d is None else cls.from_json(d, str(Path(path)))
