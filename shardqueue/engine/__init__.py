"""The queue's mechanism: train a whole shard, measure, commit, roll back, resume.

    runner.py        train / screen / measure / decide, decay; checkpoints and rollbacks through training/resume.py
    state.py         the queue state and the one function that changes it
    log.py           the append-only, fsynced decision log (torn last line handled)
    packing.py       a shard trained once, whole: lossless rows, masked padding
    schedule.py      warmup-stable-decay: LR warm-up in stage A, constant weight decay, the decay
    start_record.py  what the start record pins beyond the arguments: config.json, calibration.json, machine
"""
