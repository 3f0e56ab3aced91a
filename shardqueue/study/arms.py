"""The three arms as variants of the queue runner (queue_runner.QueueRunner), one run each.

A  policy plain. While it runs past the budget on the pool, a decay branch is taken each
   time the accepted targets first reach a reference point: from a copy of the state, the
   final decay (the same reserved decay shards, the same length) is trained, the model is
   scored on the selection and control sets, and the copy is restored bitwise. The branch
   at the budget is exactly the state a budget-limited run would decay from, so it is arm
   A's result; all branches together are the reference curve of the selection axis.
B  policy queue; with the curve variant, the control values the rule sees are residuals
   from the frozen reference curves (observed minus L̂_d at the model's trained targets).
C  policy random, but the rejected candidate positions are fixed in advance from (rate,
   seed) by random_rejection.rejected_positions, so C rejects exactly as often as B did.
"""
import copy
import time

from shardqueue.domains import measure
from shardqueue.runner import QueueRunner
from shardqueue.study.curve_fit import curve


class ReferenceBranchRunner(QueueRunner):
    """Arm A: plain order, with a scored decay branch at each reference threshold of accepted targets."""

    thresholds = ()

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.thresholds = sorted(self.thresholds)
        self.branches, self.branch_seconds, self.branch_updates = [], 0.0, 0

    def accepted_targets(self):
        return sum(self.shards[s]["tokens"] for s in self.state["accepted"])

    def commit(self):
        super().commit()
        if self.state["flagged"] or not self.thresholds:
            return
        acc = self.accepted_targets()
        while len(self.branches) < len(self.thresholds) and acc >= self.thresholds[len(self.branches)]:
            self.branches.append(self.reference_branch(self.thresholds[len(self.branches)], acc))

    def reference_branch(self, threshold, acc):
        from shardqueue.packing import update_batches

        t0 = time.time()
        snap, spent = self.snapshot(), copy.deepcopy(self.spent)
        ids = list(self.pool["decay"])
        total = sum(len(update_batches(*self.rows(s), self.cfg.micro_rows, self.cfg.accum)) for s in ids)
        done, dec_t, before = 0, 0, self.targets
        for sid in ids:  # the same decay as QueueRunner.decay: LR multiplier 1 - i/U over the reserved shards
            info = self.train_shard(sid, lr_mult=lambda i, s=done: 1.0 - (s + i) / total)
            done += info["updates"]
            dec_t += info["targets"]
        D = self.targets
        w = self.world
        sel = measure(self.trainer.model, w.sets["selection"], w.token_bytes, w.device)
        ctrl = measure(self.trainer.model, w.sets["control"], w.token_bytes, w.device)
        self.restore(snap)
        self.spent = spent  # a branch is the study's reference work, not the arm's own
        sec = time.time() - t0
        self.branch_seconds += sec
        self.branch_updates += done
        self.log(f"  reference branch at {acc:,} accepted targets (threshold {threshold:,}): selection mean "
                 f"{sum(sel.values()) / len(sel):.4f} after decay, {D:,} trained targets")
        return {"threshold": threshold, "accepted_targets": acc, "D": D, "selection": sel, "control": ctrl,
                "decay_updates": done, "decay_targets": dec_t, "stable_history_targets": before, "seconds": round(sec, 3), "accepted": list(self.state["accepted"])}


class FixedRandomRunner(QueueRunner):
    """Arm C: rejects exactly at the pre-drawn candidate positions (with the queue's mechanics)."""

    positions = frozenset()

    def decide(self, position, ref, after):
        if self.policy == "random":
            return ["random"] if position in self.positions else []
        return super().decide(position, ref, after)


def residual_measure(base, curves, targets):
    """A measure function whose values are observed minus reference loss at the current trained
    targets (targets() is read at measurement time); domains without a curve pass through."""
    def measure_residuals(model):
        D = targets()
        return {d: v - (float(curve(D, **curves[d])) if d in curves else 0.0) for d, v in base(model).items()}
    return measure_residuals


class CurveRunner(QueueRunner):
    """Arm B with the curve-guided rule: the rule reads residuals from the frozen reference curves."""

    curves = None

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.curves:
            self.measure_fn = residual_measure(self.measure_fn, self.curves, lambda: self.targets)


def runner_class(cls, **attrs):
    """(subclass of cls with attrs set, list that collects its instances): for run_queue.run(runner_cls=...)."""
    made = []

    def init(self, *a, **k):
        cls.__init__(self, *a, **k)
        made.append(self)

    return type(cls.__name__, (cls,), {**attrs, "__init__": init}), made
