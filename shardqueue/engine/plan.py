"""What one queue run needs, typed and checked where it is built (the command line from its options, the study
for each arm): the policy and its parameters, the seed, the budget, the rotation length, the branch check and
the final decay inside the queue; and the policy the plan names, built on a calibration record."""
from dataclasses import dataclass, replace

from errors import DataError
from shardqueue.policy.measured import CurveResiduals, QueueRule
from shardqueue.policy.unmeasured import FixedPositions, PlainOrder, RandomRejection
from shardqueue.settings import POLICIES, branch_mode

WHAT = "run plan"
# the plan's fields the start record holds: these always, and those after them only when set, so a run without
# them writes the start record it wrote before they were recorded (the committed references, tests/reference/)
RECORDED = ("policy", "seed", "reject_rate", "budget_targets", "rotation_shards", "branch_check")
RECORDED_WHEN_SET = ("decay_updates", "rejected_positions", "curves")


@dataclass(frozen=True)
class RunPlan:
    policy: str = "queue"  # settings.POLICIES
    seed: int | None = None  # None: the config's seed (api.run: the calibration's)
    reject_rate: float = 0.0  # policy random: the chance that a candidate is flagged
    # accepted targets after which the queue stops (or its final decay begins); None: api.run takes 60% of the
    # candidates' tokens, and a runner given None works until the pool is spent
    budget_targets: int | None = None
    rotation_shards: int = 6
    branch_check: bool = True  # a first-rotation rejection of the rule gets the calibration's branch check
    # the final decay inside the queue over exactly this many updates, on shards the policy accepts (the
    # study's arms); None: after the queue, on the pool's reserved decay shards
    decay_updates: int | None = None
    # the study's variants: arm C flags exactly these candidate positions (policy random); arm B's rule reads
    # residuals from these frozen reference curves (policy queue; {domain: {"a", "b", "c", "D0"}})
    rejected_positions: frozenset | None = None
    curves: dict | None = None
    checkpoints: bool = True  # False: no checkpoint is written (a re-execution: nothing resumes it)

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise DataError(f"policy {self.policy!r} is not one of {', '.join(POLICIES)}")
        if self.policy == "random" and not 0 < self.reject_rate < 1:
            raise DataError(f"policy random needs 0 < reject_rate < 1 (got {self.reject_rate})")
        for k in ("rotation_shards", "budget_targets", "decay_updates"):
            v = getattr(self, k)
            if v is not None and not v >= 1:
                raise DataError(f"{WHAT} key {k!r}: {v} must be at least 1")
        if self.rejected_positions is not None and self.policy != "random":
            raise DataError(f"{WHAT}: rejected positions are arm C's, a plan of policy random (not {self.policy})")
        if self.curves and self.policy != "queue":
            raise DataError(f"{WHAT}: reference curves are the rule's, a plan of policy queue (not {self.policy})")

    def check_new(self):
        """A new run's plan: a reject rate under a policy other than random is refused (it would be recorded and
        never used, and a resume without it refused). Not in __post_init__: a run that recorded one before this
        check still rebuilds its plan from its start record, resumes with it and re-executes."""
        if self.policy != "random" and self.reject_rate != 0:
            raise DataError(f"reject rate {self.reject_rate:g}: a reject rate is policy random's; policy {self.policy} "
                            "takes none (--reject-rate goes with --policy random)")

    def resolved(self, seed, budget_targets) -> "RunPlan":
        """The plan with its seed and budget given where it left them to the calibration."""
        return replace(self, seed=seed if self.seed is None else self.seed,
                       budget_targets=budget_targets if self.budget_targets is None else self.budget_targets)

    def recorded(self) -> dict:
        """The plan as the start record holds it (JSON values): what a re-execution rebuilds it from."""
        out = {k: getattr(self, k) for k in RECORDED}
        for k in RECORDED_WHEN_SET:
            v = getattr(self, k)
            if v is not None:
                out[k] = sorted(v) if k == "rejected_positions" else v
        return out

    @classmethod
    def from_record(cls, start: dict, **kw) -> "RunPlan":
        """The plan a start record holds (recorded()); kw: the fields not recorded (checkpoints)."""
        got = {k: start[k] for k in RECORDED + RECORDED_WHEN_SET if k in start}
        if got.get("rejected_positions") is not None:
            got["rejected_positions"] = frozenset(got["rejected_positions"])
        return cls(**got, **kw)

    def policy_on(self, calib) -> object:
        """The policy (policy/protocol.py) this plan names, on a calibration record."""
        if self.policy == "plain":
            return PlainOrder()
        if self.policy == "random":
            if self.rejected_positions is not None:
                return FixedPositions(frozenset(self.rejected_positions))
            return RandomRejection(self.seed, self.reject_rate)
        rule = QueueRule.of(calib, branch_mode(calib))
        return CurveResiduals(rule, self.curves) if self.curves else rule
