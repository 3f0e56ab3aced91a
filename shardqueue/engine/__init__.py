"""The queue's mechanism, the same under every policy: train a whole shard, measure, commit, roll back, resume.

    plan.py          RunPlan: what one run needs (policy, seed, budget, rotation length, ...), checked where built;
                     the plan as the start record holds it, and back (a re-execution's)
    runner.py        Runner: candidate and recovery steps, records, commits, rollbacks; observers of its commits
    recovery.py      a flagged shard's recovery test and its decision: accepted, or rolled back and deferred or
                     quarantined (the candidate that reaches the budget is accepted without its recovery shard);
                     undecided where no recovery shard can train (no reserve, no decay update left)
    branch_check.py  the branch check of a first-rotation rejection, on the policy's branch judge
    admission.py     a new source at a rotation boundary: input checks and its own calibration on a branch
    final_decay.py   the final decay (LR to 0) and the scores of the model it leaves (final.pt)
    starts.py        how a run begins: fresh (the start record), resumed after a kill, continued at a checkpoint
    screen.py        the forward-only screen: a shard's BPB against a fixed pool sample's
    training.py      optimizer updates over a shard's rows, the parameters' SHA256, one thread for queue work
    scoring.py       official, control and selection BPB of a model
    run_folder.py    a run folder's files: moved aside, states with their SHA256, the start record's checks
    state.py         the queue state and the one function that changes it
    log.py           the append-only, fsynced decision log (torn last line handled)
    packing.py       a shard trained once, whole: lossless rows, masked padding
    schedule.py      warmup-stable-decay: LR warm-up in stage A, constant weight decay, the decay
    start_record.py  what the start record pins beyond the run plan: config.json, calibration.json, machine
"""
