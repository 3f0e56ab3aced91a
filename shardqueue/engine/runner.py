"""The queue runner: train a whole shard, measure, and decide under a policy.

Policies (one code path, a switch at the decision only):
  queue   the measured rule (rule.py): flag a rise above k*sigma_d, judge it after
          one recovery shard, roll back an unrecovered rise
  plain   no measurement-driven decision: every shard is accepted in (seeded) order
  random  a shard is "flagged" with probability reject_rate by an RNG seeded with (seed,
          position), and then rejected with the queue's own mechanics (recovery shard,
          rollback, return to the front, deferral, quarantine)

One step = one shard trained (or one decision): its records are applied to the state,
a checkpoint holding the model, both optimizers, RNG, step, state and the step's records
is written, and only then are the records appended to the log.

A flagged shard's recovery is tested on the front shard of the reserve (shards of the
homogeneous calibration source, never a candidate): a harmful sibling cannot serve as
recovery, and the recovery transition is of the kind the recovery criterion was
calibrated on. The branch check of a first-rotation rejection (settings.BRANCH_CHECKS):
`clean` branches on a reserve shard, and only a clean branch that rises as much blames the
training phase; `literal` is the proposal's branch on another shard of the same source.
"""
import copy
import hashlib
import time
import uuid
from pathlib import Path

import numpy as np
import torch

from corpus.errors import DataError
from shardqueue.engine.log import DecisionLog, read_log, record_sha256, verify_chain
from shardqueue.engine.packing import StreamedShard, update_batches
from shardqueue.engine.schedule import decay, set_schedule
from shardqueue.engine.start_record import machine, start_settings
from shardqueue.engine.state import apply, initial_state
from shardqueue.policy.rule import branch_verdict, judge, rises
from shardqueue.settings import POLICIES, QueueSettings
from shardqueue.world.domains import measure, rows_bpb, sampled_overlap
from shardqueue.world.inspection import inspect_shard
from shardqueue.world.rotation import load_rotation, save_rotation, shard_docs
from training.checkpoint import newest_good_checkpoint, save_checkpoint
from training.device import autocast, to_device
from training.resume import restore_trainer_state, trainer_state
from training.trainer import Trainer

KEEP = 3


def params_sha256(model):
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if v.numel() else b"")
    return h.hexdigest()


def train_rows(trainer, x, y, step, updates, micro_rows, accum, lr_mult):
    """Optimizer updates over rows (x, y), each token weighted equally within its update. With a
    compiled forward the last microbatch is padded with masked rows (update_batches): one shape.

    Returns (mean loss per target, updates, targets)."""
    cfg, dev = trainer.cfg, trainer.device
    nats, targets, n_up = 0.0, 0, 0
    for i, mbs in enumerate(update_batches(x, y, micro_rows, accum, pad=trainer.fixed_rows is not None)):
        mult = lr_mult(i) if callable(lr_mult) else lr_mult
        set_schedule(trainer.adamw, trainer.muon, step + i, mult, cfg.weight_decay)  # constant weight decay
        valid = sum(int((yy >= 0).sum()) for _, yy in mbs)
        total = torch.zeros((), dtype=torch.float64, device=dev)
        for xx, yy in mbs:
            # inputs follow the model; the forward runs under train.py's autocast policy
            with autocast(dev, trainer.autocast):
                loss = trainer.fwd(to_device(xx, dev), to_device(yy, dev), reduction="none").sum()
            (loss / valid).backward()
            total += loss.detach().double()
        trainer.adamw.step()
        trainer.muon.step()
        trainer.model.zero_grad(set_to_none=True)
        if not np.isfinite(total.item()):
            raise RuntimeError(f"loss became {total.item()} at update {step + i}")
        nats, targets, n_up = nats + total.item(), targets + valid, n_up + 1
    return nats / max(targets, 1), n_up, targets



def main_source(shard):
    """The source that holds most of a shard's documents (a shard can mix sources); a tie goes to the first listed."""
    return max(shard["sources"].items(), key=lambda kv: kv[1])[0]


class QueueRunner:
    # The final decay inside the queue (set by the study's arms): once the budget of accepted
    # targets is reached, the queue goes on judging candidates under its own policy while the LR
    # falls linearly to 0 over exactly `decay_updates` updates, so the decay trains only shards
    # that this policy accepted ("the decay at the end of training uses accepted shards only").
    # A rollback also rolls back the decay's position. None: the reserved decay shards (decay()).
    decay_updates = None

    def __init__(self, cfg, world, pool, calib, out, policy="queue", seed=None, reject_rate=0.0, rotation_shards=6,
                 budget_targets=None, branch_check=True, measure_fn=None, log=print, run_id=None, calibration_dir=".",
                 corpus=None):
        """calibration_dir: the calibration folder as the run records it (relative to out); corpus: the
        prepared corpus's identity, recorded in the start record and checked on resume."""
        if policy not in POLICIES:
            raise DataError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
        if policy == "random" and not 0 < reject_rate < 1:
            raise DataError(f"policy random needs 0 < reject_rate < 1 (got {reject_rate})")
        self.cfg, self.world, self.pool, self.calib, self.out = cfg, world, pool, calib, Path(out)
        self.policy, self.seed, self.reject_rate = policy, cfg.seed if seed is None else seed, reject_rate
        self.rotation_shards, self.budget, self.branch = rotation_shards, budget_targets, branch_check
        # the branch check's kind is a calibration setting: fixed, like the rule, before the queue runs
        self.branch_mode = QueueSettings.of((calib.get("plan") or {}).get("settings")).branch_check
        self.log = log
        self.shards = {s["id"]: s for s in pool["shards"]}
        self.trainer = Trainer(cfg, world.device)
        # through the trainer's forward (compiled where training is) at one shape, as eval scores
        self.measure_fn = measure_fn or (lambda model: measure(
            self.trainer.scoring_forward(model), world.sets["control"], world.token_bytes, world.device,
            self.trainer.autocast, self.trainer.fixed_rows))
        self.state = initial_state(pool["order"], pool.get("reserve", []))
        self.step, self.targets, self.spent = 0, 0, {"updates": 0, "targets": 0, "seconds": 0.0}
        self.ref, self.rollback, self.seq, self.run_id = None, None, 0, run_id or uuid.uuid4().hex[:12]
        self.calibration_dir, self.corpus = str(calibration_dir), corpus
        self.prev_sha256 = None  # the newest record's hash: the chain an edited earlier record breaks
        self.dlog, self._owed, self.flag_info = None, [], None  # the decision log, records it is owed, a flag's losses
        self._pool_bpb, self._pool_sample = {}, None
        self.decay_start = None  # the step at which the in-queue decay began

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
        return self.decay_updates - (self.step - self.decay_start)

    def train_shard(self, sid, lr_mult=None, total_updates=None):
        x, y = self.rows(sid)
        if lr_mult is None:
            lr_mult = 1.0
            if self.decay_start is not None:  # in the decay: LR by decay position; the decay ends at exactly U updates
                per = self.cfg.micro_rows * self.cfg.accum
                left = max(0, self.decay_left())
                x, y = x[: left * per], y[: left * per]
                lr_mult = decay(self.step - self.decay_start, self.decay_updates)
        t0 = time.time()
        loss, n, targets = train_rows(self.trainer, x, y, self.step, total_updates or self.cfg.updates,
                                      self.cfg.micro_rows, self.cfg.accum, lr_mult)
        sec = time.time() - t0
        self.step += n
        self.targets += targets
        self.spent["updates"] += n
        self.spent["targets"] += targets
        self.spent["seconds"] += sec
        return {"train_loss": loss, "updates": n, "targets": targets, "seconds": round(sec, 3)}

    def screen(self, sid):
        """Forward-only screen: the model's BPB on the shard minus its BPB on the pool sample, through the
        trainer's forward (compiled where training is) at one shape."""
        tr = self.trainer
        key = params_sha256(tr.model)
        if key not in self._pool_bpb:
            x, y = self.pool_sample()
            self._pool_bpb = {key: rows_bpb(tr.eval_fwd, x, y, self.world.token_bytes, self.world.device, tr.autocast,
                                            fixed_rows=tr.fixed_rows)}
        x, y = self.rows(sid)
        b = rows_bpb(tr.eval_fwd, x, y, self.world.token_bytes, self.world.device, tr.autocast,
                     fixed_rows=tr.fixed_rows)
        return {"shard_bpb": b, "pool_bpb": self._pool_bpb[key], "score": b - self._pool_bpb[key]}

    def pool_sample(self, n_rows=32):
        """n_rows full rows drawn (seeded) from all ordinary pool shards, read row by row."""
        if self._pool_sample is None:
            ids = [s for s in self.pool["order"] if not self.shards[s]["sources"].get(self.pool["harmful"]["label"])]
            rng = np.random.default_rng(self.pool["seed"] + 5)
            views = [self.rows(sid) for sid in ids]
            full = np.cumsum([len(x) - 1 for x, _ in views])  # full rows only: a shard's last row is padded
            total = int(full[-1]) if len(full) else 0
            pick = np.sort(rng.choice(total, size=min(n_rows, total), replace=False))
            xs, ys = [], []
            for g in pick.tolist():
                k = int(np.searchsorted(full, g, side="right"))
                r = g - (int(full[k - 1]) if k else 0)
                xs.append(views[k][0][r])
                ys.append(views[k][1][r])
            self._pool_sample = (np.stack(xs), np.stack(ys))
        return self._pool_sample

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
        """Checkpoint (with the records it owes the log; the newest KEEP are kept), then append those records."""
        payload = {**trainer_state(self.trainer), "step": self.step, "targets": self.targets,
                   "ref": self.ref, "state": self.state, "log_seq": self.seq, "records": self._owed,
                   "run_id": self.run_id, "spent": self.spent, "policy": self.policy, "seed": self.seed,
                   "rollback": self.rollback if self.state["flagged"] else None, "flag_info": self.flag_info,
                   "config": self.cfg.to_dict()}
        save_checkpoint(self.out, self.seq, payload, keep=KEEP)
        for rec in self._owed:
            self.dlog.write(rec)
            self.log(self.describe(rec))
        self._owed = []

    @staticmethod
    def describe(rec):
        bits = [f"[{rec['seq']:>4}] {rec['event']:<12} {rec.get('shard', '')}"]
        for k in ("role", "outcome", "flagged", "unrecovered", "note", "rotation", "verdict"):
            if rec.get(k) not in (None, [], ""):
                bits.append(f"{k}={rec[k]}")
        if "deltas" in rec:
            bits.append("change (BPB) " + " ".join(f"{d}={rec['deltas'][d]:+.4f}" for d in sorted(rec["deltas"])))
        return " ".join(bits)

    # ---- the queue -----------------------------------------------------------------------
    def admit_sources(self, r):
        """At the boundary before rotation r: input checks and own calibration of each new source due."""
        done = set(self.state["sources"])
        for src in self.pool.get("late_sources", []):
            if src["enter_rotation"] != r or src["label"] in done:
                continue
            checks = {}
            for sid in src["calibration"] + src["shards"]:
                # document by document from the token files: a shard is never held whole
                h, in_vocab, bos_ok = hashlib.sha256(), True, True
                for i in shard_docs(self.shards[sid]):
                    t = np.asarray(self.world.stream.doc_tokens(i))
                    h.update(t.astype(np.uint32).tobytes())
                    in_vocab &= bool(len(t) == 0 or int(t.max()) < self.cfg.vocab)
                    bos_ok &= bool(len(t) and t[0] == self.world.bos and int((t == self.world.bos).sum()) == 1)
                checks[sid] = {"sha256": h.hexdigest() == self.shards[sid]["sha256"], "token_ids_in_vocab": in_vocab,
                               "bos_only_at_starts": bos_ok}
            overlap, _, _ = sampled_overlap(self.world.sets, self.world.stream,
                                            [shard_docs(self.shards[s]) for s in src["shards"]])
            # its own calibration: its calibration shards trained from the current state on a branch
            snap = self.snapshot()
            states = [self.measure_fn(self.trainer.model)]
            for sid in src["calibration"]:
                self.train_shard(sid)
                states.append(self.measure_fn(self.trainer.model))
            restored = self.restore(snap)
            deltas = {d: [b[d] - a[d] for a, b in zip(states, states[1:])] for d in states[0]}
            passed = all(all(c.values()) for c in checks.values()) and max(overlap.values(), default=0) <= 0.05
            self.record("source", label=src["label"], admitted=src["shards"] if passed else [], passed=passed,
                        checks=checks, overlap_13gram=overlap, calibration_shards=src["calibration"],
                        calibration_deltas=deltas, params_sha256=restored)

    def start_rotation(self, seed_extra=0):
        """A rotation boundary: carried shards plus the next fresh ones, in an order seeded by (seed, rotation)."""
        self.admit_sources(self.state["rotation"] + 1)
        st = self.state
        n_fresh = min(len(st["fresh"]), max(0, self.rotation_shards - len(st["next_rotation"])))
        members = list(st["next_rotation"]) + st["fresh"][:n_fresh]
        if not members:
            return False
        r = st["rotation"] + 1
        rng = np.random.default_rng([self.seed, r])
        order = [members[j] for j in rng.permutation(len(members))]
        man = {"name": f"rotation-v{r}", "version": r, "seed": self.seed, "pool_sha256": self.pool["_sha256"],
               "carried": list(st["next_rotation"]), "order": order,
               "shards": [self.shards[s] for s in order]}
        path = self.out / f"rotation_v{r}.json"
        if path.exists():
            old = load_rotation(path)
            old.pop("_sha256")
            if old != man:
                raise DataError(f"{path}: an active rotation manifest cannot be changed (it differs from the replay)")
            digest = (self.out / f"rotation_v{r}.json.sha256").read_text().split()[0]
        else:
            digest = save_rotation(path, man)
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
        return self.policy == "plain" or bool(self.state["reserve"])

    def budget_left(self):
        acc = sum(self.shards[s]["tokens"] for s in self.state["accepted"])
        return self.budget is None or acc < self.budget

    def decide(self, position, ref, after):
        """Flagged domains under the policy."""
        if self.policy == "plain":
            return []
        if self.policy == "random":
            u = np.random.default_rng([self.seed, 7919, position]).random()
            return ["random"] if u < self.reject_rate else []
        return rises(ref, after, self.calib["sigma"], self.calib["k"])

    def measured(self, sid, role, info, after, **kw):
        ref = self.ref
        sig, k = self.calib.get("sigma", {}), self.calib.get("k", 0.0)
        if self.decay_start is not None:
            kw["phase"] = "decay"
        return self.record("train", shard=sid, role=role, **info, losses=after, ref=ref,
                           deltas={d: after[d] - ref[d] for d in after},
                           thresholds={d: k * sig[d] for d in after if d in sig}, history_targets=self.targets,
                           spent_targets=self.spent["targets"], policy=self.policy, **kw)

    def candidate_step(self):
        sid = self.state["pending"][0]
        position = self.state["candidates"]
        scr = self.screen(sid)
        self.rollback = self.snapshot()
        info = self.train_shard(sid)
        after = self.measure_fn(self.trainer.model)
        flagged = self.decide(position, self.ref, after)
        self.measured(sid, "candidate", info, after, screen=scr, flagged=flagged, position=position)
        self.flag_info = {"losses": after, "flagged": flagged} if flagged else None
        if not flagged:
            self.ref = after
            self.record("accept", shard=sid, note="")
        self.commit()

    def recovery_step(self):
        sid = self.state["flagged"]
        flagged = self.flag_info["flagged"]
        rec_sid = (self.state["reserve"] or [None])[0]  # never a candidate (state.py)
        if rec_sid is None:  # nothing to test recovery with
            self.restore(self.rollback)
            self.record("rollback", shard=sid, to_step=self.step, params_sha256=self.rollback["params_sha256"])
            self.record("undecided", shard=sid, note="no shard left to test recovery with")
            self.commit()
            return
        scr = self.screen(rec_sid)
        info = self.train_shard(rec_sid)
        after = self.measure_fn(self.trainer.model)
        if self.policy == "random":
            still = flagged
        else:
            still = judge(self.ref, self.flag_info["losses"], after, self.calib["sigma"], self.calib["k"], self.calib["frac"])[1]
        frac, k = self.calib.get("frac", 0.0), self.calib.get("k", 0.0)
        self.measured(rec_sid, "recovery", info, after, screen=scr, tested=sid, unrecovered=still, flagged=[],
                      limits={d: frac * k * self.calib["sigma"][d] for d in flagged if d in self.calib.get("sigma", {})})
        if not still:
            self.ref = after
            self.record("accept", shard=sid, note="recovered")
            self.record("accept", shard=rec_sid, note="recovery shard", role="recovery")
            self.commit()
            return
        got = self.restore(self.rollback)
        self.record("rollback", shard=sid, to_step=self.step, params_sha256=got)
        self.record("return_front", shard=rec_sid, to="reserve")
        outcome = None
        if self.policy == "queue" and self.branch and self.state["rotation"] == 1 and not self.state["rejections"].get(sid):
            outcome = self.branch_check(sid, flagged)
        if outcome is None:
            outcome = "deferred" if not self.state["rejections"].get(sid) else "quarantined"
        self.record("reject", shard=sid, outcome=outcome, flagged=flagged, unrecovered=still)
        if outcome == "quarantined":
            path, cause = inspect_shard(self, sid)
            self.record("inspect", shard=sid, report=path, cause_found=cause)
        self.commit()

    def branch_check(self, sid, flagged):
        """From the pre-shard state, branches that tell the training phase from the shard or its source.

        clean: first a reserve shard (calibration source, clean); if it rises in every flagged domain
        as the shard did, the phase is blamed and the shard returned. If not, another shard of the
        shard's own source is branched on too, to name what the rejection blames: "source" when it
        rises, "shard" when not; the rejection counts either way. literal (the proposal's check): only
        the same-source branch; its rise returns the shard. Every branch is restored bitwise.
        Returns "returned" or None (the rejection counts)."""
        src = main_source(self.shards[sid])
        st = self.state
        sibs = [s for s in st["pending"] + st["fresh"] + st["next_rotation"]
                if s != sid and main_source(self.shards[s]) == src]
        branches, rose = [], {}
        if self.branch_mode == "clean":
            branches.append(self.branch_on(st["reserve"][0], "clean", flagged))
            rose["clean"] = branches[-1]["rose"]
        elif not sibs:
            self.record("branch", shard=sid, possible=False, mode=self.branch_mode, source=src,
                        note=f"no other shard of source {src!r} is left in the pool")
            return None
        if not rose.get("clean") and sibs:  # a clean rise already blames the phase, whatever the source does
            branches.append(self.branch_on(sibs[0], "source", flagged))
            rose["source"] = branches[-1]["rose"]
        verdict = branch_verdict(self.branch_mode, rose.get("clean"), rose.get("source"))
        total = {k: sum(b[k] for b in branches) for k in ("updates", "targets")}
        self.record("branch", shard=sid, possible=True, mode=self.branch_mode, source=src, branches=branches,
                    verdict=verdict, **total, seconds=round(sum(b["seconds"] for b in branches), 3),
                    params_sha256=self.rollback["params_sha256"])
        return "returned" if verdict == "phase" else None

    def branch_on(self, b, kind, flagged):
        """Train shard b from the rollback point, measure, restore bitwise: the branch's record."""
        info = self.train_shard(b)
        after = self.measure_fn(self.trainer.model)
        rose = rises(self.ref, after, self.calib["sigma"], self.calib["k"], flagged) == flagged
        self.restore(self.rollback)
        return {"kind": kind, "shard": b, "sources": self.shards[b]["sources"], **info, "losses": after,
                "deltas": {d: after[d] - self.ref[d] for d in after}, "rose": rose}

    def run(self, resume=False):
        """Work through rotations until the budget of accepted targets is reached or nothing is left."""
        if self.policy != "plain" and not self.pool.get("reserve"):
            raise DataError("pool.json has no reserve of calibration-source shards to test recovery with "
                            "(a calibration made before the reserve existed); calibrate again")
        self.out.mkdir(parents=True, exist_ok=True)
        log_path = self.out / "decisions.jsonl"
        self._owed, self.flag_info = [], None
        if resume:
            self.resume(log_path)
        else:
            if log_path.exists():
                raise DataError(f"{log_path}: a decision log exists; resume it or start with --fresh")
            self.dlog = DecisionLog(log_path)
            self.ref = self.measure_fn(self.trainer.model)
            self.record("start", losses=self.ref, policy=self.policy, seed=self.seed, reject_rate=self.reject_rate,
                        calibration={k: self.calib.get(k) for k in ("k", "frac", "sigma")},
                        pool_sha256=self.pool["_sha256"], budget_targets=self.budget,
                        rotation_shards=self.rotation_shards, start_step=self.step, start_targets=self.targets,
                        calibration_dir=self.calibration_dir, corpus=self.corpus,
                        # whether first-rotation rejections are branch-checked (run's option), and how (calibration's)
                        branch_check=self.branch, branch_mode=self.branch_mode,
                        params_sha256=params_sha256(self.trainer.model),
                        **start_settings(self.cfg, self.calib, self.world.device))
            self.commit()
        if resume and self.decay_updates:
            self.decay_start = next((r["step"] for r in read_log(log_path, log=lambda s: None)
                                     if r["event"] == "decay_start"), None)
        while True:
            if self.state["flagged"]:
                self.recovery_step()
                continue
            if self.budget_left():
                if self.next_front() is None or not self.recovery_possible():
                    break
                self.candidate_step()
                continue
            if not self.decay_updates:
                break
            if self.decay_start is None:
                self.decay_start = self.step
                self.record("decay_start", step=self.step, history_targets=self.targets, updates=self.decay_updates)
                self.commit()
            if self.decay_left() <= 0 or self.next_front() is None or not self.recovery_possible():
                break
            self.candidate_step()
        if self._owed:
            self.commit()
        return self

    def resume(self, log_path):
        recs = read_log(log_path, repair=True, log=self.log)
        run_id = recs[0].get("run_id")

        def skip(path, p):
            if "log_seq" not in p:  # the final decay's checkpoint of a run killed before it became final.pt
                return f"note: {path.name} is an unfinished final decay; resuming from the step before it"
            if p.get("run_id") != run_id:
                raise DataError(f"{path}: belongs to run {p.get('run_id')}, but {log_path.name} is run {run_id}")
            return None

        path, p = newest_good_checkpoint(self.out, log=self.log, skip=skip)
        if p is None:
            raise DataError(f"{self.out}: no checkpoint to resume from")
        last, C = len(recs), p["log_seq"]
        owed = p["records"]
        first_owed = owed[0]["seq"] if owed else C + 1
        if last > C or last < first_owed - 1:
            raise DataError(f"{log_path}: holds {last} records but {path.name} was written at record {C}; "
                            f"the log and the checkpoint do not belong together")
        for r in owed:
            if r["seq"] <= last and {k: v for k, v in recs[r["seq"] - 1].items()} != r:
                raise DataError(f"{log_path}: record {r['seq']} differs from the one {path.name} holds")
        full = recs + [r for r in owed if r["seq"] > last]
        verify_chain(full, log_path)
        self.dlog = DecisionLog(log_path, seq=last)
        for r in owed:
            if r["seq"] > last:
                self.dlog.write(r)
        self.prev_sha256 = record_sha256(full[-1])
        self.run_id = run_id
        self.take_checkpoint(p)
        self.record("resumed", checkpoint=path.name, log_seq=C, machine=machine(self.world.device))
        self.commit()

    def take_checkpoint(self, p):
        """The runner as a queue checkpoint left it, at its record p["log_seq"] (resume; re-execution)."""
        restore_trainer_state(self.trainer, p)
        self.step, self.targets, self.ref, self.state = p["step"], p["targets"], p["ref"], p["state"]
        self.seq, self.spent, self.rollback, self.flag_info = p["log_seq"], p["spent"], p["rollback"], p["flag_info"]

    # ---- the final decay ------------------------------------------------------------------
    def decay(self, score_fn):
        """Linear decay to LR 0 over the reserved decay shards (fresh pool shards, never judged), then score;
        when the decay already ran inside the queue (decay_updates), only score and record it.

        The LR multiplier of decay update i of U is 1 - i/U, so the last update runs at 1/U and
        the schedule reaches 0 at the end. The same shards and length serve every policy.
        """
        infos = []
        if self.decay_start is not None:  # the decay ran inside the queue (train records of phase "decay")
            kept = set(self.state["accepted"])
            ids = list(dict.fromkeys(r["shard"] for r in read_log(self.out / "decisions.jsonl", log=lambda s: None)
                                     if r["event"] == "train" and r.get("phase") == "decay" and r["shard"] in kept))
            done = self.step - self.decay_start
        else:
            ids = list(self.pool["decay"])
            total = sum(len(update_batches(*self.rows(s), self.cfg.micro_rows, self.cfg.accum)) for s in ids)
            done = 0
            for sid in ids:
                start = done
                info = self.train_shard(sid, lr_mult=lambda i, s=start: 1.0 - (s + i) / total)
                done += info["updates"]
                infos.append({"shard": sid, **info})
        scores = score_fn(self.trainer.model)
        path = save_checkpoint(self.out, 999999, {**trainer_state(self.trainer), "step": self.step,
                                                  "targets": self.targets, "run_id": self.run_id, "scores": scores,
                                                  "config": self.cfg.to_dict()}, keep=0)
        final = self.out / "final.pt"
        path.replace(final)
        path.with_suffix(".json").replace(self.out / "final.json")
        self.record("decay", shards=ids, updates=done, trained=infos, history_targets=self.targets, scores=scores,
                    in_queue=self.decay_start is not None,
                    checkpoint=final.name, params_sha256=params_sha256(self.trainer.model))
        self.record("done", spent=self.spent)
        self.commit()
        return scores
