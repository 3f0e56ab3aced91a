"""Dose-response: do domain losses distinguish individual shards reliably?

From the calibrated state, for each harmful fraction f in (0, 10, 25, 50, 100%) and each
of `trials` ordinary pool shards, a dose shard is made by remapping (harmful.py) the
shard's first documents until a share f of its tokens is harmful; it is trained whole,
measured, judged by the calibrated rule, then one clean recovery shard (the next pool
shard) is trained and the recovery criterion applied. Every trial starts from the same
calibrated state (restored bitwise). Output: dose.json and dose.md (flag and rejection
rate per fraction, with the mean largest rise in units of the threshold).
"""
import sys
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_json, atomic_write_text

FRACTIONS = (0.0, 0.1, 0.25, 0.5, 1.0)


def dose_response(out, calibration_dir, trials=4, fractions=FRACTIONS, device="cpu", log=print):
    from shardqueue import api as rq

    with rq.one_thread():
        return _dose(out, calibration_dir, trials, fractions, device, log)


def _dose(out, calibration_dir, trials, fractions, device, log):
    from tqdm import tqdm

    from shardqueue import api as rq
    from shardqueue.harmful import remapped
    from shardqueue.packing import shard_rows, shard_tokens
    from shardqueue.rotation import shard_docs
    from shardqueue.rule import judge
    from training.trainer import Trainer

    out = Path(out)
    cfg, world, pool, calib = rq.open_calibration(calibration_dir, device)
    st = rq._read_state(Path(calibration_dir) / "calibrated_state.pt", calib["state_sha256"])
    shards = {s["id"]: s for s in pool["shards"]}
    clean = [s for s in pool["order"] if not shards[s]["sources"].get(pool["harmful"]["label"])]
    if len(clean) < trials + 1:
        raise ValueError(f"the pool has {len(clean)} ordinary shards; {trials + 1} needed")
    perm = np.random.default_rng(pool["seed"] + 7).permutation(cfg.vocab)
    trainer = Trainer(cfg, device)

    def measure():
        return rq.measure(trainer.model, world.sets["control"], world.token_bytes, device)

    def train(tokens):
        x, y = shard_rows(tokens, cfg.context, world.bos)
        rq.train_rows(trainer, x, y, st["step"], cfg.updates, cfg.micro_rows, cfg.accum, 1.0)

    trainer.load_state_dict(st["trainer"])
    ref = measure()
    rows = []
    bar = tqdm(total=len(fractions) * trials, desc="dose trials", unit="trial", file=sys.stderr)
    for f in fractions:
        res = []
        for j in range(trials):
            docs = shard_docs(shards[clean[j]])
            parts, harmful, total = [], 0, shards[clean[j]]["tokens"]
            for i in docs:
                t = np.asarray(world.train.doc_tokens(i), dtype=np.int64)
                if harmful < f * total - 1e-9:
                    t = remapped(t, perm, world.bos)
                    harmful += len(t)
                parts.append(t)
            trainer.load_state_dict(st["trainer"])
            train(np.concatenate(parts))
            after = measure()
            train(shard_tokens(world.train, shard_docs(shards[clean[j + 1]])))
            after2 = measure()
            flagged, unrec = judge(ref, after, after2, calib["sigma"], calib["k"], calib["frac"])
            rise = max((after[d] - ref[d]) / (calib["k"] * calib["sigma"][d]) for d in ref)
            res.append({"shard": clean[j], "harmful_share": harmful / total, "flagged": flagged, "unrecovered": unrec,
                        "max_rise_over_threshold": rise})
            bar.update(1)
        rows.append({"fraction": f, "trials": res, "flag_rate": float(np.mean([bool(r["flagged"]) for r in res])),
                     "reject_rate": float(np.mean([bool(r["unrecovered"]) for r in res])),
                     "mean_max_rise_over_threshold": float(np.mean([r["max_rise_over_threshold"] for r in res])),
                     "mean_harmful_share": float(np.mean([r["harmful_share"] for r in res]))})
    bar.close()
    rec = {"k": calib["k"], "frac": calib["frac"], "sigma": calib["sigma"], "rows": rows, "trials": trials,
           "note": "every trial starts from the calibrated state; each fraction uses the same ordinary shards"}
    atomic_write_json(out / "dose.json", rec)
    md = ["# Dose-response of the queue's rule", "",
          f"k = {calib['k']}, recovery fraction {calib['frac']}; {trials} ordinary shards per fraction, each trial from "
          "the calibrated state, followed by one clean recovery shard.", "",
          "| harmful fraction | actual share | flag rate | rejection rate | mean largest rise / threshold |",
          "|---|---|---|---|---|"]
    md += [f"| {r['fraction']:.0%} | {r['mean_harmful_share']:.1%} | {r['flag_rate']:.2f} | {r['reject_rate']:.2f} | "
           f"{r['mean_max_rise_over_threshold']:.2f} |" for r in rows]
    atomic_write_text(out / "dose.md", "\n".join(md) + "\n")
    log("\n".join(md))
    return rec
