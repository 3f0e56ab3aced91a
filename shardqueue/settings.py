"""The queue's calibration settings (stage A and the pool it freezes), typed: their defaults, the
least each may be, and the plain record that calibration_plan.json and calibration.json hold; and
the names the command line offers before it loads the queue (branch checks, run policies, the
re-execution tolerance).

Built from a mapping (a test's dict, the command line's options, a calibration record) by
presets.typed.build: an unknown key or a value of the wrong type is named in one line."""
from dataclasses import asdict, dataclass, fields

from errors import DataError
from presets.typed import at_least, build

WHAT = "queue setting"
# the branch check of a first-rotation rejection (engine/branch_check.py):
#   clean    a branch on a reserve shard of the calibration source (and one on another shard of the
#            shard's own source): only a clean branch that rises as much blames the training phase
#   literal  the proposal's check: a branch on another shard of the same source; its rise returns the shard
BRANCH_CHECKS = ("clean", "literal")
# the policies of a run (engine/plan.py, policy/): the rule, no measurement-driven decisions, random rejections
POLICIES = ("queue", "plain", "random")
# re-execution (reexecute.py) on another machine: absolute, on every float (BPB, nats per target)
DEFAULT_TOLERANCE = 1e-3
# every seed the queue takes (run --seed, calibrate --pool-seed, the training config's seed): numpy's generators
# refuse a negative one and torch's one past 2**64 - 1, each after a run has written its first files; one range,
# the usual 32-bit one, checked before anything is written
SEED_MAX = 2**32 - 1


def check_seed(value, what):
    """DataError naming `what` unless value is a seed: an integer from 0 to SEED_MAX."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MAX:
        raise DataError(f"{what} {value!r}: a seed is an integer from 0 to {SEED_MAX:,}")


@dataclass(frozen=True)
class QueueSettings:
    shard_tokens: int = 1500
    warmup_shards: int = 6
    sigma_shards: int = 10
    held_out_shards: int = 12
    candidates: int = 14
    decay_shards: int = 2
    harmful_shards: int = 1
    prose_shards: int = 1
    late_shards: int = 0
    per_domain: int = 12
    pool_seed: int = 1003
    # the study's settings (study/presets.py): damaged pool shards (damaged_pool.py); held-out transitions
    # on a discarded branch; k and frac chosen on the first `choose_transitions` held-out transitions and
    # the rate reported on the rest (0: in-sample); sub-shard checkpoints on held-out shards
    damaged_shards: int = 0
    held_out_branch: bool = False
    choose_transitions: int = 0
    checkpoints_per_shard: int = 1
    # shards of the calibration source held back from stage A: recovery shards and clean branches
    # draw on them (runner.recovery_step), so no candidate ever tests another's recovery
    reserve_shards: int = 4
    branch_check: str = "clean"
    domains: dict | None = None  # control and selection domains from a file (domains.load_domains); None: built in

    # the least each count may be: sigma needs two deltas, a pool at least one candidate
    MINIMA = {"sigma_shards": 2, "per_domain": 1, "warmup_shards": 0, "held_out_shards": 1, "candidates": 1,
              "decay_shards": 1, "shard_tokens": 1, "harmful_shards": 0, "prose_shards": 0, "late_shards": 0,
              "damaged_shards": 0, "choose_transitions": 0, "checkpoints_per_shard": 1, "reserve_shards": 1}

    def __post_init__(self):
        at_least(self, self.MINIMA, WHAT)
        check_seed(self.pool_seed, f"{WHAT} key 'pool_seed'")
        if self.branch_check not in BRANCH_CHECKS:
            raise DataError(f"{WHAT} key 'branch_check': {self.branch_check!r} is not one of {', '.join(BRANCH_CHECKS)}")

    @classmethod
    def of(cls, values=None) -> "QueueSettings":
        """Settings from a QueueSettings, a mapping of some keys over the defaults, or None (the defaults)."""
        if isinstance(values, cls):
            return values
        return build(cls, dict(values or {}), WHAT)

    @classmethod
    def counts(cls) -> tuple:
        """The integer settings (what the command line offers as --options)."""
        return tuple(f.name for f in fields(cls) if f.type is int)

    def to_dict(self) -> dict:
        """The record: every setting, domains only when given."""
        d = asdict(self)
        if d["domains"] is None:
            del d["domains"]
        return d


def branch_mode(calib: dict) -> str:
    """The branch check a calibration record fixed (calibration_plan.json's settings; the default for a record
    without them): like the rule, it is fixed before the queue runs."""
    return QueueSettings.of((calib.get("plan") or {}).get("settings")).branch_check
