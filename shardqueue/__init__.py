"""The rollback shard queue of the proposal "Can a model help choose its next training data?".

Shards of whole documents are trained once each and measured on held-out control domains; a
shard whose rise does not recover is rolled back bitwise, deferred to the next rotation, and
quarantined on a second rejection; every decision is logged so the run can be rebuilt.

    api.py         calibrate, run, return from quarantine, score: what the command lines call
    settings.py    the calibration settings, typed: defaults, minima, the record calibration writes; run policies
    world.py       the training stream, the control/selection sets, the frozen pool (pool.json)
    domains.py     control and selection domains (defined in one place), BPB, 13-gram overlap
    packing.py     a shard trained once, whole: lossless rows, masked padding
    rotation.py    document-aligned shards, SHA256s, seeded order, frozen manifests
    harmful.py     the harmful source: real documents with a corrupted token mapping
    damage.py      realistic text-level damage (mojibake, boilerplate, line_shuffle, truncate)
    damaged_pool.py  pool shards holding that damage at natural doses (the study's presets)
    schedule.py    warmup-stable-decay: LR warm-up in stage A, constant weight decay, the decay
    rule.py        the rule, the recovery criterion, calibration on transitions held out of sigma
    state.py       the queue state and the one function that changes it
    runner.py      train / screen / measure / decide (policies queue, plain, random), decay; checkpoints
                   and rollbacks through training/resume.py, the component train.py uses too
    log.py         the append-only, fsynced decision log (torn last line handled)
    replay.py      reconstruct: replay the log, check every record and manifest
    reexecute.py   reconstruct --execute: run the queue again, compare every logged number with the log
    start_record.py  what the start record pins beyond the arguments: config.json, calibration.json, machine
    inspection.py  the inspection report of a quarantined shard
    report.py      report.md, decisions.parquet/.csv, the control-curve figure
    dose.py        dose-response: flag/reject rate against the exact harmful share of a shard (--harm)
    sources.py     a new source added to a run (run --add-source NAME=PATH), replayed by reconstruct
    footprint.py   peak host memory and disk of a preset's plan, term by term (host_footprint)
    study/         the A/B/C experiment (see study/__init__.py)

The command lines are queue/run_queue.py and queue/study.py. The package is named
`shardqueue`, not `queue`, so that it never shadows the standard library's `queue`.
"""
