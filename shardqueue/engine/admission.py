"""A new source at a rotation boundary (world/sources.py adds it to a run): the input checks of each of its
shards, its 13-gram overlap with the control and selection sets, and its own calibration, its calibration
shards trained from the current state on a branch that is then restored bitwise. Only a source that passes
every check joins the rotation being composed."""
from shardqueue.world.domains import sampled_overlap
from shardqueue.world.rotation import shard_docs
from shardqueue.world.sources import input_checks

MAX_OVERLAP = 0.05  # the largest 13-gram overlap with a control or selection set a new source may have


def admit_sources(runner, r):
    """At the boundary before rotation r: each new source due is checked and calibrated, and recorded."""
    done = set(runner.state["sources"])
    for src in runner.pool.get("late_sources", []):
        if src["enter_rotation"] != r or src["label"] in done:
            continue
        checks = {sid: input_checks(runner.world, runner.shards[sid], runner.cfg.vocab)
                  for sid in src["calibration"] + src["shards"]}
        overlap, _, _ = sampled_overlap(runner.world.sets, runner.world.stream,
                                        [shard_docs(runner.shards[s]) for s in src["shards"]])
        snap = runner.snapshot()
        states = [runner.measure()]
        for sid in src["calibration"]:
            runner.train_shard(sid)
            states.append(runner.measure())
        restored = runner.restore(snap)
        deltas = {d: [b[d] - a[d] for a, b in zip(states, states[1:])] for d in states[0]}
        passed = all(all(c.values()) for c in checks.values()) and max(overlap.values(), default=0) <= MAX_OVERLAP
        runner.record("source", label=src["label"], admitted=src["shards"] if passed else [], passed=passed,
                      checks=checks, overlap_13gram=overlap, calibration_shards=src["calibration"],
                      calibration_deltas=deltas, params_sha256=restored)
