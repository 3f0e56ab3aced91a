"""The policies that read the control losses: the proposal's rule (rule.py, calibrated in stage A) and its
curve-guided variant, which reads residuals from frozen reference curves instead of the losses themselves."""
from dataclasses import dataclass

import numpy as np

from shardqueue.policy.rule import branch_verdict, judge, rises


def curve(D, a, b, c, D0=1.0):
    """The reference curve L̂(D) = a + b·(D/D0)^(−c) (study/curve_fit.py fits it)."""
    return a + b * (np.asarray(D, dtype=float) / D0) ** (-c)


@dataclass(frozen=True)
class RuleBranchCheck:
    """The rule's branch check: a branch rose as much when it rose over k x sigma_d in every flagged domain."""
    mode: str
    sigma: dict
    k: float

    def rose(self, ref, after, flagged):
        return rises(ref, after, self.sigma, self.k, flagged) == flagged

    def verdict(self, clean_rose, source_rose):
        return branch_verdict(self.mode, clean_rose, source_rose)


@dataclass(frozen=True)
class QueueRule:
    """The proposal's rule: flag a rise above k x sigma_d, judge it after one recovery shard."""
    sigma: dict | None
    k: float | None
    frac: float | None
    branch_mode: str
    name = "queue"
    can_flag = True

    @classmethod
    def of(cls, calib, branch_mode):
        """The rule of a calibration record (a record without k, as a test's or the GPU check's, flags nothing
        until asked)."""
        return cls(calib.get("sigma"), calib.get("k"), calib.get("frac"), branch_mode)

    @property
    def branch_check(self):
        return RuleBranchCheck(self.branch_mode, self.sigma, self.k)

    def seen(self, losses, trained_targets):
        return losses

    def flag(self, position, ref, after):
        return rises(ref, after, self.sigma, self.k)

    def unrecovered(self, ref, flagged_after, flagged, after):
        return judge(ref, flagged_after, after, self.sigma, self.k, self.frac)[1]


@dataclass(frozen=True)
class CurveResiduals:
    """The rule on residuals: each control loss minus its frozen reference curve at the model's trained
    targets (a domain without a curve passes through), in every measurement the run makes."""
    rule: QueueRule
    curves: dict  # {domain: {"a", "b", "c", "D0"}}
    name = "queue"
    can_flag = True

    @property
    def branch_check(self):
        return self.rule.branch_check

    def seen(self, losses, trained_targets):
        return {d: v - (float(curve(trained_targets, **self.curves[d])) if d in self.curves else 0.0)
                for d, v in losses.items()}

    def flag(self, position, ref, after):
        return self.rule.flag(position, ref, after)

    def unrecovered(self, ref, flagged_after, flagged, after):
        return self.rule.unrecovered(ref, flagged_after, flagged, after)
