#!/usr/bin/env python3
"""The rollback shard queue (proposal seeds/003): train one shard at a time, measure
held-out domain losses, roll back a shard whose rise does not recover over the next
shard, defer it once, quarantine it on a second rejection, and log every decision.

  python queue/run_queue.py calibrate --config CFG.json [key=value ...] --out runs/queue
  python queue/run_queue.py run --config CFG.json [key=value ...] --out runs/queue [--resume]
  python queue/run_queue.py return SHARD --out runs/queue     # one return from quarantine
  python queue/run_queue.py reconstruct --out runs/queue      # rebuild the queue from the log

`calibrate` trains on shards of one homogeneous source and fixes sigma_d and k
(calibration.json). `run` freezes a rotation manifest (rotation.json + .sha256) over the
training pool, then works through it with a constant learning rate; every accepted state
is a checkpoint holding the model, optimizers, RNG and the queue position; at the end a
linear decay runs on accepted shards only and the official metric is taken.
"""
import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(1, str(HERE))

import torch  # noqa: E402

from control_domains import build_controls, measure  # noqa: E402
from decision_log import DecisionLog, read_log, reconstruct  # noqa: E402
from rejection_rule import calibrate, rises  # noqa: E402
from shard_rotation import (build_rotation, load_rotation, merge_rotations, save_rotation, shard_docs,  # noqa: E402
                            source_labels)

from corpus.atomic import atomic_write_json  # noqa: E402
from corpus.errors import DataError  # noqa: E402


class QueueRunner:
    """State: pending (front first), next_rotation, quarantined, accepted, rejections, returns."""

    def __init__(self, cfg, stream, manifest, controls, token_bytes, calib, out, device="cpu", measure_fn=None,
                 log=print):
        from training.trainer import Trainer

        self.cfg, self.stream, self.manifest, self.out = cfg, stream, manifest, Path(out)
        self.controls, self.tb, self.calib, self.device, self.log = controls, token_bytes, calib, device, log
        self.shards = {s["id"]: s for s in manifest["shards"]}
        self.trainer = Trainer(cfg, device)
        self.measure_fn = measure_fn or (lambda model, history: measure(model, controls, token_bytes, device))
        self.state = {"pending": list(manifest["order"]), "next_rotation": [], "quarantined": [], "accepted": [],
                      "rejections": {}, "returns": {}, "rotation": 0}
        self.step = 0  # optimizer updates done in the current model history
        self.history = []  # shards trained since the start, in the current (not rolled back) history
        self.ref = None  # control losses at the last accepted state
        self.rollback = None  # in-memory copy of the last accepted state

    # ---- training --------------------------------------------------------------------
    def updates_for(self, sid):
        return max(1, self.shards[sid]["tokens"] // self.cfg.targets_per_update)

    def train_shard(self, sid):
        from loaders.batches import MicrobatchLoader
        from loaders.packers import Packer

        sub = self.stream.subset(shard_docs(self.shards[sid]))
        loader = MicrobatchLoader(Packer(sub, "original", self.cfg.context + 1, self.cfg.buffer), self.cfg.micro_rows,
                                  device=self.device)
        n = self.updates_for(sid)
        losses = [self.trainer.update(loader, self.step + i, self.cfg.updates, lr_mult=1.0)[0] for i in range(n)]
        self.step += n
        self.history.append(sid)
        return float(sum(losses) / n), n

    def snapshot(self):
        from training.checkpoint import rng_states

        return {"trainer": copy.deepcopy(self.trainer.state_dict()), "rng": rng_states(), "step": self.step,
                "history": list(self.history), "ref": dict(self.ref), "state": copy.deepcopy(self.state)}

    def restore(self, snap):
        from training.checkpoint import set_rng_states

        self.trainer.load_state_dict(copy.deepcopy(snap["trainer"]))
        set_rng_states(snap["rng"])
        self.step, self.history, self.ref = snap["step"], list(snap["history"]), dict(snap["ref"])

    def checkpoint(self, seq):
        from training.checkpoint import save_checkpoint

        self.rollback = self.snapshot()
        save_checkpoint(self.out, seq, {**self.rollback, "log_seq": seq, "config": self.cfg.to_dict()}, keep=3)

    # ---- queue -------------------------------------------------------------------------
    def next_shard(self, dlog):
        st = self.state
        if not st["pending"] and st["next_rotation"]:
            st["pending"], st["next_rotation"] = st["next_rotation"], []
            st["rotation"] += 1
            self.event(dlog, "rotation", rotation=st["rotation"])
        if not st["pending"]:
            return None
        sid = st["pending"].pop(0)
        self.event(dlog, "take", shard=sid)
        return sid

    def event(self, dlog, kind, **kw):
        sid = kw.get("shard")
        extra = {"sha256": self.shards[sid]["sha256"], "sources": self.shards[sid]["sources"]} if sid else {}
        e = dlog.write({"event": kind, "time": time.time(), **kw, **extra, "queue": copy.deepcopy(self.state)})
        self.log(f"[{e['seq']:>4}] {kind:<12} {sid or ''} " + " ".join(f"{k}={v}" for k, v in kw.items()
                                                                        if k in ("outcome", "rotation", "flagged", "unrecovered", "tested")))
        return e

    def run(self, accept_budget, resume=False):
        from training.checkpoint import newest_good_checkpoint

        self.out.mkdir(parents=True, exist_ok=True)
        k, sigma = self.calib["k"], self.calib["sigma"]
        log_path = self.out / "decisions.jsonl"
        if resume:
            path, payload = newest_good_checkpoint(self.out, log=self.log)
            if payload is None:
                raise DataError(f"{self.out}: nothing to resume from")
            self.restore(payload)
            self.state = copy.deepcopy(payload["state"])
            self.rollback = payload
            dlog = DecisionLog(log_path, keep_until=payload["log_seq"])
            self.log(f"resumed from {path.name}: {len(self.state['accepted'])} shards accepted")
        else:
            if log_path.exists():
                log_path.unlink()
            dlog = DecisionLog(log_path)
            self.ref = self.measure_fn(self.trainer.model, self.history)
            e = self.event(dlog, "start", losses=self.ref, k=k, sigma=sigma, manifest=self.manifest["name"])
            self.checkpoint(e["seq"])
        while len(self.state["accepted"]) < accept_budget:
            sid = self.next_shard(dlog)
            if sid is None:
                break
            loss, n = self.train_shard(sid)
            after = self.measure_fn(self.trainer.model, self.history)
            flagged = rises(self.ref, after, sigma, k)
            self.event(dlog, "measure", shard=sid, train_loss=loss, updates=n, losses=after,
                       deltas={d: after[d] - self.ref[d] for d in after}, flagged=flagged)
            if not flagged:
                self.state["accepted"].append(sid)
                self.ref = after
                self.checkpoint(self.event(dlog, "accept", shard=sid)["seq"])
                continue
            rec = self.next_shard(dlog)  # the recovery test: one more shard from the flagged state
            if rec is not None:
                loss2, n2 = self.train_shard(rec)
                after2 = self.measure_fn(self.trainer.model, self.history)
                still = rises(self.ref, after2, sigma, k, flagged)
                self.event(dlog, "recovery", shard=rec, tested=sid, train_loss=loss2, updates=n2, losses=after2,
                           deltas={d: after2[d] - self.ref[d] for d in after2}, unrecovered=still)
                if not still:
                    self.state["accepted"] += [sid, rec]
                    self.ref = after2
                    self.event(dlog, "accept", shard=sid, note="recovered")
                    self.checkpoint(self.event(dlog, "accept", shard=rec)["seq"])
                    continue
            # unrecovered rise (or nothing left to test recovery with): roll back, retry later
            self.restore(self.rollback)
            self.event(dlog, "rollback", shard=sid, to_step=self.step)
            if rec is not None:
                self.state["pending"].insert(0, rec)
                self.event(dlog, "return_front", shard=rec)
            self.state["rejections"][sid] = self.state["rejections"].get(sid, 0) + 1
            outcome = "deferred" if self.state["rejections"][sid] == 1 else "quarantined"
            (self.state["next_rotation"] if outcome == "deferred" else self.state["quarantined"]).append(sid)
            self.checkpoint(self.event(dlog, "reject", shard=sid, outcome=outcome, flagged=flagged)["seq"])
        return dlog

    def decay(self, dlog, updates, decay_shards=4):
        """Linear decay to zero on the last accepted shards only."""
        from loaders.batches import MicrobatchLoader
        from loaders.packers import Packer

        acc = self.state["accepted"][-decay_shards:]
        if not acc or updates <= 0:
            return None
        docs = [i for sid in acc for i in shard_docs(self.shards[sid])]
        loader = MicrobatchLoader(Packer(self.stream.subset(docs), "original", self.cfg.context + 1, self.cfg.buffer),
                                  self.cfg.micro_rows, device=self.device)
        for i in range(updates):
            self.trainer.update(loader, self.step, self.cfg.updates, lr_mult=1.0 - i / updates)
            self.step += 1
        after = self.measure_fn(self.trainer.model, self.history)
        return self.event(dlog, "decay", updates=updates, shards_used=acc, losses=after)


def setup(cfg):
    from corpus.layout import Layout, default_data_dir
    from corpus.tokenizer import load_token_bytes
    from loaders.stream import open_split

    dd = cfg.data_dir or str(default_data_dir())
    lay = Layout(dd, cfg.source)
    train = open_split(dd, cfg.source, "train")
    val = open_split(dd, cfg.source, "val")
    controls = build_controls(val, source_labels(lay, "val"), cfg.context)
    return lay, train, source_labels(lay, "train"), controls, load_token_bytes(lay.tokenizer)


def main(argv=None):
    from training.config import resolve_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["calibrate", "run", "return", "reconstruct"])
    ap.add_argument("shard", nargs="?", help="with `return`: the quarantined shard")
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", nargs="*", default=[], help="key=value config overrides")
    ap.add_argument("--out", default="runs/queue")
    ap.add_argument("--shard-tokens", type=int, default=20000, help="tokens per document-aligned shard")
    ap.add_argument("--calibration-shards", type=int, default=10, help="homogeneous shards for calibration (stage A)")
    ap.add_argument("--warmup-shards", type=int, default=4, help="shards trained before calibration starts measuring")
    ap.add_argument("--calibration-source", default=None, help="source label of the homogeneous shards (default: the commonest)")
    ap.add_argument("--accept", type=int, default=12, help="stop after this many accepted shards (the budget)")
    ap.add_argument("--pool-factor", type=float, default=1.5,
                    help="candidate shards per budgeted shard (the proposal's example: 1.5)")
    ap.add_argument("--decay-updates", type=int, default=4)
    ap.add_argument("--poison", type=int, default=0, help="add N shards of uniformly random tokens to the pool (a known-bad source)")
    ap.add_argument("--poison-tokens", type=int, default=None, help="tokens per poison shard (default: --shard-tokens)")
    ap.add_argument("--seed", type=int, default=1003, help="rotation order seed")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args(argv)
    out = Path(a.out)
    try:
        if a.command == "reconstruct":
            man = json.loads((out / "rotation.json").read_text())
            events = read_log(out / "decisions.jsonl")
            st = reconstruct(man["order"], events)
            last = events[-1]["queue"]
            same = {k: st[k] for k in ("pending", "next_rotation", "quarantined", "accepted")} == \
                   {k: last[k] for k in ("pending", "next_rotation", "quarantined", "accepted")}
            print(f"accepted {st['accepted']}\nnext rotation {st['next_rotation']}\nquarantined {st['quarantined']}\n"
                  f"rejections {st['rejections']}\nreturns {st['returns']}")
            print(f"{len(events)} events; reconstruction {'matches' if same else 'DIFFERS FROM'} the logged final state")
            return 0 if same else 1
        if a.command == "return":
            return return_from_quarantine(out, a.shard)
        cfg = resolve_config(a.config, a.set)
        out.mkdir(parents=True, exist_ok=True)
        lay, train, labels, controls, tb = setup(cfg)
        if a.command == "calibrate":
            res = run_calibration(cfg, train, labels, controls, tb, a, out)
            print(f"sigma {res['sigma']}  k {res['k']}  false-rejection rates {res['false_rejection_rates']}")
            return 0
        calib_path = out / "calibration.json"
        if not calib_path.exists():
            raise DataError(f"{calib_path}: run `calibrate` first (the rule is fixed before the queue runs)")
        calib = json.loads(calib_path.read_text())
        stream, labels, poison = with_poison(train, labels, a.poison, a.poison_tokens or a.shard_tokens, cfg.vocab, a.seed)
        rot_path = out / "rotation.json"
        used = set(calib["used_documents"])
        pool = [i for i in range(train.n) if i not in used]
        if rot_path.exists():
            man = load_rotation(rot_path, stream)
        else:
            man = build_rotation(stream, labels, a.shard_tokens, a.seed, "pool", docs=pool)
            keep = set(man["order"][: max(1, int(a.pool_factor * a.accept + 0.5) - len(poison))])
            man["shards"] = [sh for sh in man["shards"] if sh["id"] in keep]
            man["order"] = [sid for sid in man["order"] if sid in keep]
            if poison:
                man = merge_rotations("rotation-v1", a.seed, man,
                                      build_rotation(stream, labels, a.shard_tokens, a.seed, "poison", docs=poison, prefix="p"))
            save_rotation(rot_path, man)
        runner = QueueRunner(cfg, stream, man, controls, tb, calib, out, a.device)
        runner.trainer.load_state_dict(torch.load(out / "calibrated_state.pt", weights_only=False))
        runner.step = calib["step"]
        dlog = runner.run(a.accept, resume=a.resume)
        runner.decay(dlog, a.decay_updates)
        runner.event(dlog, "done")
        st = runner.state
        atomic_write_json(out / "queue_summary.json", {"state": st, "calibration": calib, "manifest": man["name"]})
        print(f"accepted {len(st['accepted'])}, deferred {len(st['next_rotation'])}, quarantined {st['quarantined']}, "
              f"rejections {st['rejections']}")
        return 0
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def with_poison(train, labels, n_poison, shard_tokens, vocab, seed):
    """The pool plus n_poison documents of uniformly random tokens, one shard's worth each (label 'poison')."""
    if not n_poison:
        return train, labels, []
    import numpy as np

    from loaders.stream import DocumentStream

    rng = np.random.default_rng(seed + 1)
    arrays, which, starts = train.tokens
    body = rng.integers(0, vocab - 4, size=(n_poison, shard_tokens)).astype(np.int64)
    body[:, 0] = train.bos
    arr = body.reshape(-1)
    s = DocumentStream(np.concatenate([train.lengths, np.full(n_poison, shard_tokens)]),
                       np.append(train.refills, train.n + n_poison),
                       (list(arrays) + [arr], np.concatenate([which, np.full(n_poison, len(arrays))]),
                        np.concatenate([starts, np.arange(n_poison) * shard_tokens])),
                       bos=train.bos, name=f"{train.name}+poison{n_poison}")
    return s, list(labels) + ["poison"] * n_poison, list(range(train.n, train.n + n_poison))


def run_calibration(cfg, train, labels, controls, tb, a, out):
    """Stage A: warm-up shards, then calibration shards of one source; sigma_d and k from the latter.

    The model state at the end is where the queue starts, so sigma is measured at the
    training stage the rule is applied in.
    """
    from collections import Counter

    from corpus.atomic import atomic_write_bytes

    src = a.calibration_source or Counter(labels).most_common(1)[0][0]
    n = a.warmup_shards + a.calibration_shards
    docs, tok = [], 0
    for i, lab in enumerate(labels):  # just enough documents of one source (none longer than a shard) for stage A
        if lab == src and train.lengths[i] <= a.shard_tokens and tok < n * a.shard_tokens:
            docs.append(i)
            tok += int(train.lengths[i])
    man = build_rotation(train, labels, a.shard_tokens, a.seed, "calibration", docs=docs, prefix="c")
    runner = QueueRunner(cfg, train, man, controls, tb, {"k": 0, "sigma": {}}, out, a.device)
    losses = []
    for j, s in enumerate(man["shards"]):
        if j == a.warmup_shards:
            losses.append(runner.measure_fn(runner.trainer.model, runner.history))
        runner.train_shard(s["id"])
        if j >= a.warmup_shards:
            losses.append(runner.measure_fn(runner.trainer.model, runner.history))
    if len(losses) < 3:
        raise DataError(f"source {src!r} has too few documents for {a.calibration_shards} calibration shards")
    res = calibrate(losses)
    res.update({"source": src, "losses": losses, "warmup_shards": a.warmup_shards,
                "shards": [s["id"] for s in man["shards"]], "used_documents": docs, "step": runner.step})
    import io

    buf = io.BytesIO()
    torch.save(runner.trainer.state_dict(), buf)
    atomic_write_bytes(out / "calibrated_state.pt", buf.getvalue())
    atomic_write_json(out / "calibration.json", res)
    return res


def return_from_quarantine(out, shard):
    """Log one return of a quarantined shard to the next rotation (allowed once per shard)."""
    from training.checkpoint import load_checkpoint

    if not shard:
        raise DataError("give the shard id to return")
    ckpts = sorted(Path(out).glob("ckpt_*.pt"))
    if not ckpts:
        raise DataError(f"{out}: no queue checkpoint")
    payload = load_checkpoint(ckpts[-1])
    st = payload["state"]
    if shard not in st["quarantined"]:
        raise DataError(f"{shard} is not in quarantine (quarantined: {', '.join(st['quarantined']) or 'none'})")
    if st["returns"].get(shard, 0) >= 1:
        raise DataError(f"{shard} has already returned from quarantine once")
    st["quarantined"].remove(shard)
    st["returns"][shard] = st["returns"].get(shard, 0) + 1
    st["next_rotation"].append(shard)
    dlog = DecisionLog(out / "decisions.jsonl")
    e = dlog.write({"event": "return", "shard": shard, "time": time.time(), "queue": st})
    from training.checkpoint import save_checkpoint

    save_checkpoint(out, e["seq"], {**payload, "state": st, "log_seq": e["seq"]}, keep=3)
    print(f"{shard} returns to the next rotation (logged as event {e['seq']})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
