"""What a queue run's policy decides, and nothing else: which candidate is flagged, whether a flagged one
recovered, and (for the proposal's rule) what a first-rotation rejection's branch check blames.

The engine (engine/runner.py) trains, measures, rolls back, defers and quarantines the same way under
every policy; a policy only answers its questions. Five answer them: the proposal's rule and its
curve-guided variant (measured.py), plain order, random rejection and rejection at fixed positions
(unmeasured.py)."""
from typing import Protocol


class BranchJudge(Protocol):
    """The branch check of a first-rotation rejection (the rule's; a policy without one has None)."""
    mode: str  # settings.BRANCH_CHECKS: clean or literal

    def rose(self, ref: dict, after: dict, flagged: list) -> bool:
        """Whether a branch rose in every flagged domain as the rejected shard did."""

    def verdict(self, clean_rose: bool | None, source_rose: bool | None) -> str:
        """What the branches blame: "phase" (the shard is returned), "source" or "shard"."""


class Policy(Protocol):
    name: str  # what the log records: queue, plain or random (settings.POLICIES)
    can_flag: bool  # False: nothing is ever flagged, so no recovery shard is needed
    branch_check: BranchJudge | None

    def seen(self, losses: dict, trained_targets: int) -> dict:
        """The control losses as the policy (and the log) sees them, from the measured ones."""

    def flag(self, position: int, ref: dict, after: dict) -> list:
        """The flagged domains of the candidate at this position (0, 1, ...): [] accepts it."""

    def unrecovered(self, ref: dict, flagged_after: dict, flagged: list, after: dict) -> list:
        """The flagged domains still unrecovered after the recovery shard: [] accepts the flagged shard."""
