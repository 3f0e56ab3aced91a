"""The three arms as variants of the queue runner (runner.QueueRunner), one run each.

Every arm ends with the same final decay inside its own queue (QueueRunner.decay_updates):
once the budget is reached, the LR falls linearly to 0 over exactly U updates on the next
shards that the arm's own policy accepts.

A  policy plain. It runs past the budget on the pool; each time its accepted targets first
   reach a reference threshold (spaced evenly in log D), a decay branch is taken: from a
   copy of the state, the same decay (U updates, LR 1 -> 0) trains the next shards of A's
   own plain order, exactly those the in-queue decay would train, the model is scored on
   the selection and control sets, and the copy is restored bitwise. The branch at the
   budget is arm A's result. A stops once a branch reached the lowest loss the curve must
   cover (`cover_below`) and the budget is passed, or at the cap (its run's budget); its
   own in-queue decay there is the curve's last point.
B  policy queue; with the curve variant, the control values the rule sees are residuals
   from the frozen reference curves (observed minus L̂_d at the model's trained targets).
C  policy random, but the rejected candidate positions are fixed in advance from B's number of
   rejections and the seed (random_rejection.plan_c), so C rejects as many times as B did.
"""
import copy
import time

import numpy as np

from shardqueue.engine.runner import QueueRunner, train_rows
from shardqueue.engine.schedule import decay
from shardqueue.study.curve_fit import curve
from shardqueue.world.domains import measure


class ReferenceBranchRunner(QueueRunner):
    """Arm A: plain order, with a scored decay branch at each reference threshold of accepted targets."""

    thresholds = ()
    budget_threshold = None  # the study's budget: never stop before its branch
    cover_below = None  # stop once a branch's selection mean is at or below this (the curve then spans it)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.thresholds = sorted(self.thresholds)
        self.branches, self.branch_seconds, self.branch_updates = [], 0.0, 0
        self.covered, self.stopped = False, False

    def accepted_targets(self):
        return sum(self.shards[s]["tokens"] for s in self.state["accepted"])

    def budget_left(self):
        return not self.stopped and super().budget_left()

    def commit(self):
        super().commit()
        if self.state["flagged"] or not self.thresholds or self.decay_start is not None:
            return
        acc = self.accepted_targets()
        while len(self.branches) < len(self.thresholds) and acc >= self.thresholds[len(self.branches)]:
            t = self.thresholds[len(self.branches)]
            if self.covered and self.budget_threshold is not None and t > self.budget_threshold:
                # covered: end the stable phase here; the in-queue decay gives the last point
                self.stopped = True
                self.log(f"  reference curve covers {self.cover_below:.4f}: arm A ends its stable phase at {acc:,} "
                         f"accepted targets")
                return
            if self.branches and self.branches[-1]["accepted_targets"] == acc:
                # one shard crossed two thresholds: the same state, so the same branch (not trained twice)
                b = {**self.branches[-1], "threshold": t, "repeat_of": self.branches[-1]["threshold"], "seconds": 0.0}
            else:
                b = self.reference_branch(t, acc)
            self.branches.append(b)
            if self.cover_below is not None and b["selection_mean"] <= self.cover_below:
                self.covered = True

    def upcoming(self):
        """The shards plain order trains next: the current rotation's rest, then the next rotations as
        start_rotation composes them (carried shards plus fresh ones, seeded by (seed, rotation))."""
        yield from list(self.state["pending"])
        nxt, fresh, r = list(self.state["next_rotation"]), list(self.state["fresh"]), self.state["rotation"]
        while True:
            n_fresh = min(len(fresh), max(0, self.rotation_shards - len(nxt)))
            members, fresh, nxt = nxt + fresh[:n_fresh], fresh[n_fresh:], []
            if not members:
                return
            r += 1
            rng = np.random.default_rng([self.seed, r])
            yield from [members[j] for j in rng.permutation(len(members))]

    def reference_branch(self, threshold, acc):
        t0 = time.time()
        snap, spent = self.snapshot(), copy.deepcopy(self.spent)
        U, per = self.decay_updates, self.cfg.micro_rows * self.cfg.accum
        done, dec_t, before, used, train_s = 0, 0, self.targets, [], 0.0
        for sid in self.upcoming():  # the same decay as the in-queue one: U updates, LR 1 - u/U
            if done >= U:
                break
            x, y = self.rows(sid)
            left = U - done
            t1 = time.time()
            _, n, t = train_rows(self.trainer, x[: left * per], y[: left * per], self.step, self.cfg.updates,
                                 self.cfg.micro_rows, self.cfg.accum, decay(done, U))
            train_s += time.time() - t1
            self.step, self.targets, done, dec_t = self.step + n, self.targets + t, done + n, dec_t + t
            used.append(sid)
        D = self.targets
        w = self.world
        tr = self.trainer  # scored as the queue scores: the trainer's forward at its one shape (compiled on a GPU)
        sel = measure(tr.eval_fwd, w.sets["selection"], w.token_bytes, w.device, tr.autocast, tr.fixed_rows)
        ctrl = measure(tr.eval_fwd, w.sets["control"], w.token_bytes, w.device, tr.autocast, tr.fixed_rows)
        self.restore(snap)
        self.spent = spent  # a branch is the study's reference work, not the arm's own
        sec = time.time() - t0
        self.branch_seconds += sec
        self.branch_updates += done
        m = sum(sel.values()) / len(sel)
        self.log(f"  reference branch at {acc:,} accepted targets (threshold {threshold:,}): selection mean "
                 f"{m:.4f} after decay, {D:,} trained targets")
        return {"threshold": threshold, "accepted_targets": acc, "D": D, "selection": sel, "selection_mean": m,
                "control": ctrl, "decay_updates": done, "decay_targets": dec_t, "decay_shards": used,
                "stable_history_targets": before, "seconds": round(sec, 3), "train_seconds": round(train_s, 3),
                "accepted": list(self.state["accepted"])}


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
