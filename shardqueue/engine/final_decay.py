"""A run's end: the final decay (LR linearly to 0) and the scores of the model it leaves, kept as final.pt.

The multiplier of decay update i of U is 1 - i/U, so the last update runs at 1/U and the schedule reaches 0
at the end. Without an in-queue decay (the plan's decay_updates) it runs on the pool's reserved decay shards
(fresh pool shards, never judged), the same shards and length for every policy; with one, the decay already
ran inside the queue on shards the policy accepted, and only its scores are taken and recorded."""
from shardqueue.engine.log import read_log
from shardqueue.engine.packing import update_batches
from shardqueue.engine.training import params_sha256
from training.checkpoint import save_checkpoint
from training.resume import trainer_state


def final_decay(runner, score_fn):
    """Decay, score (score_fn(model)), write final.pt and final.json, record `decay` and `done`; the scores."""
    infos = []
    if runner.decay_start is not None:  # the decay ran inside the queue (train records of phase "decay")
        kept = set(runner.state["accepted"])
        ids = list(dict.fromkeys(r["shard"] for r in read_log(runner.out / "decisions.jsonl", log=lambda s: None)
                                 if r["event"] == "train" and r.get("phase") == "decay" and r["shard"] in kept))
        done = runner.step - runner.decay_start
    else:
        ids = list(runner.pool["decay"])
        cfg = runner.cfg
        total = sum(len(update_batches(*runner.rows(s), cfg.micro_rows, cfg.accum)) for s in ids)
        done = 0
        for sid in ids:
            start = done
            info = runner.train_shard(sid, lr_mult=lambda i, s=start: 1.0 - (s + i) / total)
            done += info["updates"]
            infos.append({"shard": sid, **info})
    scores = score_fn(runner.trainer.model)
    path = save_checkpoint(runner.out, 999999, {**trainer_state(runner.trainer), "step": runner.step,
                                                "targets": runner.targets, "run_id": runner.run_id, "scores": scores,
                                                "config": runner.cfg.to_dict()}, keep=0)
    final = runner.out / "final.pt"
    path.replace(final)
    path.with_suffix(".json").replace(runner.out / "final.json")
    runner.record("decay", shards=ids, updates=done, trained=infos, history_targets=runner.targets, scores=scores,
                  in_queue=runner.decay_start is not None,
                  checkpoint=final.name, params_sha256=params_sha256(runner.trainer.model))
    runner.record("done", spent=runner.spent)
    runner.commit()
    return scores
