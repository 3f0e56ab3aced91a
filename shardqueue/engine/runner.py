"""The queue runner: train a whole shard, measure, and let the policy decide; the mechanism is the same
under every policy (policy/): a flagged shard's recovery is tested, an unrecovered one rolled back bitwise,
returned to the next rotation once, quarantined on a second rejection.

One step = one shard trained (or one decision): its records are applied to the state, a checkpoint
holding the model, both optimizers, RNG, step, state and the step's records is written, and only then
are the records appended to the log; then every observer of the runner's commits sees them (the study's
reference branches, a re-execution's comparison).

A flagged shard's recovery is tested on the front shard of the reserve (shards of the homogeneous
calibration source, never a candidate): a harmful sibling cannot serve as recovery, and the recovery
transition is of the kind the recovery criterion was calibrated on (recovery.py, which also rolls an
unrecovered shard back and decides it). A first-rotation rejection of a policy with a branch check gets it
(branch_check.py). Around the runner: starts.py (a fresh start, a resume from the
log and the newest checkpoint, a re-execution's continuation), admission.py (a new source at a rotation
boundary), final_decay.py (the final decay and its scores).
"""
import copy
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from shardqueue.engine.admission import admit_sources
from shardqueue.engine.log import describe, record_sha256
from shardqueue.engine.packing import StreamedShard
from shardqueue.engine.plan import RunPlan
from shardqueue.engine.recovery import recovery_step
from shardqueue.engine.schedule import decay
from shardqueue.engine.screen import Screen
from shardqueue.engine.run_folder import freeze_rotation
from shardqueue.engine.starts import prepare, start
from shardqueue.engine.state import apply, initial_state
from shardqueue.engine.training import params_sha256, train_rows
from shardqueue.settings import branch_mode
from shardqueue.world.domains import measure
from shardqueue.world.rotation import next_rotation, shard_docs
from training.checkpoint import save_checkpoint
from training.resume import restore_trainer_state, trainer_state
from training.trainer import Trainer

KEEP = 3


class Observer(Protocol):
    def committed(self, runner, records: list) -> None:
        """After a commit: the records it appended to the log, in order."""


class Runner:
    def __init__(self, cfg, world, pool, calib, out, plan=RunPlan(), policy=None, observers=(), log=print,
                 run_id=None, calibration_dir=".", corpus=None):
        """plan: the run's plan (its seed defaults to the config's); policy: the plan's on this calibration
        unless given; calibration_dir: the calibration folder as the run records it (relative to out); corpus:
        the prepared corpus's identity, recorded in the start record and checked on resume."""
        self.plan = plan if plan.seed is not None else replace(plan, seed=cfg.seed)
        self.policy = policy or self.plan.policy_on(calib)
        self.cfg, self.world, self.pool, self.calib, self.out = cfg, world, pool, calib, Path(out)
        self.observers, self.log = list(observers), log
        # the branch check's kind is a calibration setting: fixed, like the rule, before the queue runs
        self.branch_mode = branch_mode(calib)
        self.shards = {s["id"]: s for s in pool["shards"]}
        self.trainer = Trainer(cfg, world.device)
        # through the trainer's forward (compiled where training is) at one shape, as eval scores
        self.measure_fn = lambda model: measure(self.trainer.scoring_forward(model), world.sets["control"],
                                                world.token_bytes, world.device, self.trainer.autocast,
                                                self.trainer.fixed_rows)
        self.screen_of = Screen(world, pool, lambda sid: self.rows(sid))
        self.state = initial_state(pool["order"], pool.get("reserve", []))
        self.step, self.targets, self.spent = 0, 0, {"updates": 0, "targets": 0, "seconds": 0.0}
        self.ref, self.rollback, self.seq, self.run_id = None, None, 0, run_id or uuid.uuid4().hex[:12]
        self.calibration_dir, self.corpus = str(calibration_dir), corpus
        self.prev_sha256 = None  # the newest record's hash: the chain an edited earlier record breaks
        self.dlog, self._owed, self.flag_info = None, [], None  # the decision log, records it is owed, a flag's losses
        self.decay_start = None  # the step at which the in-queue decay began
        # why an observer ended the stable phase before the budget (arm A, covered), or None: the budget ends it
        self.stable_ended = None

    def start_from(self, state):
        """Start from a saved state (the calibrated one, or another seed's start): trainer, RNG, step, targets."""
        restore_trainer_state(self.trainer, state)
        self.step, self.targets = state["step"], state["targets"]

    # ---- model ---------------------------------------------------------------------
    def rows(self, sid):
        """The shard's (x, y) rows, read from the token files an update at a time (never cached:
        a 64M-proxy shard as int64 rows would take about 10 GB)."""
        return StreamedShard(self.world.stream, shard_docs(self.shards[sid]), self.cfg.context, self.world.bos).rows()

    def decay_left(self):
        return self.plan.decay_updates - (self.step - self.decay_start)

    def train_shard(self, sid, lr_mult=None):
        x, y = self.rows(sid)
        if lr_mult is None:
            lr_mult = 1.0
            if self.decay_start is not None:  # in the decay: LR by decay position; the decay ends at exactly U updates
                per = self.cfg.micro_rows * self.cfg.accum
                left = max(0, self.decay_left())
                x, y = x[: left * per], y[: left * per]
                lr_mult = decay(self.step - self.decay_start, self.plan.decay_updates)
        t0 = time.time()
        loss, n, targets = train_rows(self.trainer, x, y, self.step, self.cfg.updates, self.cfg.micro_rows,
                                      self.cfg.accum, lr_mult)
        sec = time.time() - t0
        self.step += n
        self.targets += targets
        self.spent["updates"] += n
        self.spent["targets"] += targets
        self.spent["seconds"] += sec
        return {"train_loss": loss, "updates": n, "targets": targets, "seconds": round(sec, 3)}

    def measure(self):
        """The control losses as the policy sees them (the curve variant: residuals at the trained targets)."""
        return self.policy.seen(self.measure_fn(self.trainer.model), self.targets)

    def screen(self, sid):
        return self.screen_of(self.trainer, sid)

    def snapshot(self):
        """The rollback point: the trainer's parts and RNG (copied), step, targets and reference losses."""
        return {**trainer_state(self.trainer, copied=True), "step": self.step, "targets": self.targets,
                "ref": dict(self.ref), "params_sha256": params_sha256(self.trainer.model)}

    def restore(self, snap):
        restore_trainer_state(self.trainer, snap, copied=True)
        self.step, self.targets, self.ref = snap["step"], snap["targets"], dict(snap["ref"])
        got = params_sha256(self.trainer.model)
        if got != snap["params_sha256"]:
            raise RuntimeError("rollback did not restore the parameters bitwise")
        return got

    # ---- records, checkpoints ---------------------------------------------------------
    def record(self, event, **kw):
        sid = kw.get("shard")
        rec = {"seq": self.seq + 1, "event": event, "time": round(time.time(), 3), "run_id": self.run_id, **kw}
        if sid:
            rec.update(sha256=self.shards[sid]["sha256"], sources=self.shards[sid]["sources"])
        if event == "accept":  # the parameters the accepted shard left: what re-execution checks bitwise
            rec["params_sha256"] = params_sha256(self.trainer.model)
        self.state = apply(self.state, rec)
        rec["queue"] = copy.deepcopy(self.state)
        rec["prev_sha256"] = self.prev_sha256  # the chain: an edited earlier record is found
        self.prev_sha256 = record_sha256(rec)
        self.seq += 1
        self._owed.append(rec)
        return rec

    def commit(self):
        """Checkpoint (with the records it owes the log; the newest KEEP are kept), append those records, then
        show them to every observer."""
        if self.plan.checkpoints:
            save_checkpoint(self.out, self.seq, {
                **trainer_state(self.trainer), "step": self.step, "targets": self.targets, "ref": self.ref,
                "state": self.state, "log_seq": self.seq, "records": self._owed, "run_id": self.run_id,
                "spent": self.spent, "policy": self.plan.policy, "seed": self.plan.seed,
                "rollback": self.rollback if self.state["flagged"] else None, "flag_info": self.flag_info,
                "config": self.cfg.to_dict()}, keep=KEEP)
        written, self._owed = self._owed, []
        for rec in written:
            self.dlog.write(rec)
            self.log(describe(rec))
        for o in self.observers:
            o.committed(self, written)

    # ---- the queue -----------------------------------------------------------------------
    def start_rotation(self):
        """A rotation boundary: new sources due are admitted, then the carried shards plus the next fresh ones
        are ordered (world/rotation.py) and frozen in the rotation's manifest."""
        admit_sources(self, self.state["rotation"] + 1)
        st, r = self.state, self.state["rotation"] + 1
        order, n_fresh = next_rotation(st["next_rotation"], st["fresh"], self.plan.rotation_shards, self.plan.seed, r)
        if not order:
            return False
        man = {"name": f"rotation-v{r}", "version": r, "seed": self.plan.seed, "pool_sha256": self.pool["_sha256"],
               "carried": list(st["next_rotation"]), "order": order, "shards": [self.shards[s] for s in order]}
        path, digest = freeze_rotation(self.out, r, man)
        self.record("rotation", rotation=r, order=order, fresh_taken=n_fresh, manifest=path.name, manifest_sha256=digest)
        return True

    def next_front(self):
        if not self.state["pending"] and not self.start_rotation():
            return None
        return self.state["pending"][0]

    def recovery_possible(self):
        """Whether a reserve shard is there to test a flag's recovery with (a policy that can flag does
        not judge a shard that would end undecided). The reserve never runs dry: an accepted recovery
        shard goes to its back."""
        return not self.policy.can_flag or bool(self.state["reserve"])

    def accepted_tokens(self):
        return sum(self.shards[s]["tokens"] for s in self.state["accepted"])

    def budget_left(self):
        return not self.stable_ended and (self.plan.budget_targets is None
                                          or self.accepted_tokens() < self.plan.budget_targets)

    def measured(self, sid, role, info, after, **kw):
        ref = self.ref
        sig, k = self.calib.get("sigma", {}), self.calib.get("k", 0.0)
        if self.decay_start is not None:
            kw["phase"] = "decay"
        return self.record("train", shard=sid, role=role, **info, losses=after, ref=ref,
                           deltas={d: after[d] - ref[d] for d in after},
                           thresholds={d: k * sig[d] for d in after if d in sig}, history_targets=self.targets,
                           spent_targets=self.spent["targets"], policy=self.plan.policy, **kw)

    def candidate_step(self):
        sid = self.state["pending"][0]
        position = self.state["candidates"]
        scr = self.screen(sid)
        self.rollback = self.snapshot()
        info = self.train_shard(sid)
        after = self.measure()
        flagged = self.policy.flag(position, self.ref, after)
        self.measured(sid, "candidate", info, after, screen=scr, flagged=flagged, position=position)
        self.flag_info = {"losses": after, "flagged": flagged} if flagged else None
        if not flagged:
            self.ref = after
            self.record("accept", shard=sid, note="")
        self.commit()

    def recovery_step(self):
        recovery_step(self)

    def branch_on(self, b, kind, flagged):
        """Train shard b from the rollback point, measure, restore bitwise: the branch's record."""
        info = self.train_shard(b)
        after = self.measure()
        rose = self.policy.branch_check.rose(self.ref, after, flagged)
        self.restore(self.rollback)
        return {"kind": kind, "shard": b, "sources": self.shards[b]["sources"], **info, "losses": after,
                "deltas": {d: after[d] - self.ref[d] for d in after}, "rose": rose}

    def begin_decay(self):
        """The in-queue decay's start, recorded; with the observer's reason when one ended the stable phase
        before the budget (a re-execution, which has no such observer, takes that end from the log)."""
        self.decay_start = self.step
        ended = {"stable_ended_by": self.stable_ended} if self.stable_ended else {}
        self.record("decay_start", step=self.step, history_targets=self.targets, updates=self.plan.decay_updates,
                    **ended)
        self.commit()

    # ---- a run ---------------------------------------------------------------------------
    def run(self):
        """A fresh run through rotations until the budget of accepted targets is reached or nothing is left."""
        prepare(self)
        start(self)
        return self.work()

    def work(self):
        """Candidates and recoveries until the budget is reached (then the in-queue decay, when the plan has one)
        or nothing is left."""
        while True:
            if self.state["flagged"]:
                self.recovery_step()
                continue
            if self.decay_start is None and self.budget_left():
                if self.next_front() is None or not self.recovery_possible():
                    break
                self.candidate_step()
                continue
            if not self.plan.decay_updates:
                break
            if self.decay_start is None:
                self.begin_decay()
            if self.decay_left() <= 0 or self.next_front() is None or not self.recovery_possible():
                break
            self.candidate_step()
        if self._owed:
            self.commit()
        return self
