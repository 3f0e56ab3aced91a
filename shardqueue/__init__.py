"""The rollback shard queue of the proposal "Can a model help choose its next training data?".

Shards of whole documents are trained once each and measured on held-out control domains; a
shard whose rise does not recover is rolled back bitwise, deferred to the next rotation, and
quarantined on a second rejection; every decision is logged so the run can be rebuilt.

    settings.py     the calibration settings, typed: defaults, minima, the record calibration writes; run policies
    world/          the corpus as the queue sees it, the frozen pool, its sources (see world/__init__.py)
    policy/         what decides: the rule, plain order, random rejection, ... (see policy/__init__.py)
    engine/         the mechanism under every policy: train, measure, commit, roll back, resume (engine/__init__.py)
    calibration.py  stage A, and a calibration folder read back: its record, its world, a seed's start state
    checks/         reconstruct, re-execution, the run's report (see checks/__init__.py)
    out_folder.py   what each command writes into its --out, and the refusal of a folder holding anything else
    runs.py         a run in its folder from start to summary; a return from quarantine; a checkpoint's scores
    api.py          the facade the command lines and the main job call: calibrate, RunPlan, run, return, score
    study/          the A/B/C experiment, dose-response, the footprint of a preset (see study/__init__.py)

Each line imports only lines above it (tests/test_layout.py holds the order).

The command lines are queue/run_queue.py and queue/study.py. The package is named
`shardqueue`, not `queue`, so that it never shadows the standard library's `queue`.
"""
