"""The three arms as run plans of the one queue runner (engine/plan.py), one run each, and arm A's reference
branches, an observer of its runner's commits.

Every arm ends with the same final decay inside its own queue (RunPlan.decay_updates): once the budget is
reached, the LR falls linearly to 0 over exactly U updates on the next shards that the arm's own policy
accepts.

A  policy plain. It runs past the budget on the pool; each time its accepted targets first reach a reference
   threshold (spaced evenly in log D), a decay branch is taken (ReferenceBranches): from a copy of the state,
   the same decay (U updates, LR 1 -> 0) trains the next shards of A's own plain order, exactly those the
   in-queue decay would train, the model is scored on the selection and control sets, and the copy is
   restored bitwise. The branch at the budget is arm A's result. A stops once a branch reached the lowest
   loss the curve must cover (`cover_below`) and the budget is passed, or at the cap (its run's budget); its
   own in-queue decay there is the curve's last point.
B  policy queue; with the curve variant (RunPlan.curves), the control values the rule sees are residuals
   from the frozen reference curves (observed minus L̂_d at the model's trained targets).
C  policy random, but the rejected candidate positions are fixed in advance from B's number of rejections and
   the seed (random_rejection.plan_c; RunPlan.rejected_positions), so C rejects as many times as B did.
"""
import copy
import time

from shardqueue.engine.plan import RunPlan
from shardqueue.engine.schedule import decay
from shardqueue.engine.training import train_rows
from shardqueue.world.domains import measure
from shardqueue.world.rotation import upcoming


def arm_b_plan(seed, budget, rotation, decay_updates, curves=None):
    return RunPlan(policy="queue", seed=seed, budget_targets=budget, rotation_shards=rotation,
                   decay_updates=decay_updates, curves=curves)


def arm_c_plan(seed, budget, rotation, decay_updates, positions, rate):
    """Arm C's plan; `rate` (B's rejections over C's decision window) is recorded in C's start record, not used."""
    return RunPlan(policy="random", seed=seed, reject_rate=min(max(rate, 1e-9), 1 - 1e-9), budget_targets=budget,
                   rotation_shards=rotation, decay_updates=decay_updates, rejected_positions=frozenset(positions))


def arm_a_plan(seed, budget, rotation, decay_updates):
    return RunPlan(policy="plain", seed=seed, budget_targets=budget, rotation_shards=rotation,
                   decay_updates=decay_updates)


class ReferenceBranches:
    """Arm A's decay branches, one at each reference threshold of accepted targets, taken after a commit."""

    def __init__(self, thresholds=(), budget_threshold=None, cover_below=None):
        """budget_threshold: the study's budget (never stop before its branch); cover_below: stop once a branch's
        selection mean is at or below this (the curve then spans it)."""
        self.thresholds, self.budget_threshold, self.cover_below = sorted(thresholds), budget_threshold, cover_below
        self.branches, self.branch_seconds, self.branch_updates = [], 0.0, 0
        self.covered, self.stopped = False, False

    def committed(self, runner, records):
        if runner.state["flagged"] or not self.thresholds or runner.decay_start is not None:
            return
        acc = sum(runner.shards[s]["tokens"] for s in runner.state["accepted"])
        while len(self.branches) < len(self.thresholds) and acc >= self.thresholds[len(self.branches)]:
            t = self.thresholds[len(self.branches)]
            if self.covered and self.budget_threshold is not None and t > self.budget_threshold:
                # covered: end the stable phase here; the in-queue decay gives the last point
                self.stopped = True
                runner.stable_ended = (f"arm A's reference branches: its curve covers {self.cover_below:.4f}, the "
                                       f"lowest loss it must reach")
                runner.log(f"  reference curve covers {self.cover_below:.4f}: arm A ends its stable phase at {acc:,} "
                           f"accepted targets")
                return
            if self.branches and self.branches[-1]["accepted_targets"] == acc:
                # one shard crossed two thresholds: the same state, so the same branch (not trained twice)
                b = {**self.branches[-1], "threshold": t, "repeat_of": self.branches[-1]["threshold"], "seconds": 0.0}
            else:
                b = self.reference_branch(runner, t, acc)
            self.branches.append(b)
            if self.cover_below is not None and b["selection_mean"] <= self.cover_below:
                self.covered = True

    def reference_branch(self, runner, threshold, acc):
        """The decay branch at this threshold: trained, scored, and the runner restored bitwise."""
        t0 = time.time()
        snap, spent = runner.snapshot(), copy.deepcopy(runner.spent)
        cfg, tr, w = runner.cfg, runner.trainer, runner.world
        U, per = runner.plan.decay_updates, cfg.micro_rows * cfg.accum
        done, dec_t, before, used, train_s = 0, 0, runner.targets, [], 0.0
        # the same decay as the in-queue one: U updates, LR 1 - u/U, on the shards plain order trains next
        for sid in upcoming(runner.state, runner.plan.rotation_shards, runner.plan.seed):
            if done >= U:
                break
            x, y = runner.rows(sid)
            left = U - done
            t1 = time.time()
            _, n, t = train_rows(tr, x[: left * per], y[: left * per], runner.step, cfg.updates, cfg.micro_rows,
                                 cfg.accum, decay(done, U))
            train_s += time.time() - t1
            runner.step, runner.targets, done, dec_t = runner.step + n, runner.targets + t, done + n, dec_t + t
            used.append(sid)
        D = runner.targets
        # scored as the queue scores: the trainer's forward at its one shape (compiled on a GPU)
        sel = measure(tr.eval_fwd, w.sets["selection"], w.token_bytes, w.device, tr.autocast, tr.fixed_rows)
        ctrl = measure(tr.eval_fwd, w.sets["control"], w.token_bytes, w.device, tr.autocast, tr.fixed_rows)
        runner.restore(snap)
        runner.spent = spent  # a branch is the study's reference work, not the arm's own
        sec = time.time() - t0
        self.branch_seconds += sec
        self.branch_updates += done
        m = sum(sel.values()) / len(sel)
        runner.log(f"  reference branch at {acc:,} accepted targets (threshold {threshold:,}): selection mean "
                   f"{m:.4f} after decay, {D:,} trained targets")
        return {"threshold": threshold, "accepted_targets": acc, "D": D, "selection": sel, "selection_mean": m,
                "control": ctrl, "decay_updates": done, "decay_targets": dec_t, "decay_shards": used,
                "stable_history_targets": before, "seconds": round(sec, 3), "train_seconds": round(train_s, 3),
                "accepted": list(runner.state["accepted"])}
