"""The rollback shard queue of the proposal "Can a model help choose its next training data?".

Shards of whole documents are trained once each and measured on held-out control domains; a
shard whose rise does not recover is rolled back bitwise, deferred to the next rotation, and
quarantined on a second rejection; every decision is logged so the run can be rebuilt.

    settings.py    the calibration settings, typed: defaults, minima, the record calibration writes; run policies
    world/         the corpus as the queue sees it, the frozen pool, its sources (see world/__init__.py)
    policy/        the rule and the recovery criterion (see policy/__init__.py)
    engine/        train / screen / measure / decide, the state, the log, checkpoints (see engine/__init__.py)
    checks/        reconstruct, re-execution, the run's report (see checks/__init__.py)
    api.py         calibrate, run, return from quarantine, score: what the command lines call
    study/         the A/B/C experiment, dose-response, the footprint of a preset (see study/__init__.py)

The command lines are queue/run_queue.py and queue/study.py. The package is named
`shardqueue`, not `queue`, so that it never shadows the standard library's `queue`.
"""
