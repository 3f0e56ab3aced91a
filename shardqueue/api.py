"""The shard queue's programmatic API (the proposal "Can a model help choose its next training data?"): a
facade, every name defined in the module beside it. Every function returns plain JSON-able dicts and writes
its JSON files; nothing reads argv. The command lines over it are queue/run_queue.py and queue/study.py.

    calibrate()               stage A: freeze the pool, train warm-up and sigma shards of one homogeneous
                              source, choose k and the recovery fraction on transitions held out of sigma
                              (calibration.py)
    check_calibrated(), open_calibration()  a calibration folder's record, and its world rebuilt
    RunPlan                   what one run needs: policy, seed, budget, rotation length, ... (engine/plan.py)
    run()                     one queue run to the end: rotations, decay, scores, summary, report (runs.py)
    return_from_quarantine()  one return of an inspected, cause-free shard to the next rotation (runs.py)
    score(), score_checkpoint()  official, control and selection BPB of a model or a queue checkpoint
    describe_calibration(), describe_run()  the one-line results the command line and the main job print
    prose_note()              why a prose shard asked for was not planted, or of which register (calibration.py)
    candidates_for_budget()   how many candidate shards a budget needs (world/pool.py)
"""
from shardqueue.calibration import calibrate, check_calibrated, describe_calibration, open_calibration, prose_note
from shardqueue.engine.plan import RunPlan
from shardqueue.engine.scoring import score
from shardqueue.runs import describe_run, return_from_quarantine, run, score_checkpoint
from shardqueue.world.pool import candidates_for_budget

__all__ = ["RunPlan", "calibrate", "candidates_for_budget", "check_calibrated", "describe_calibration",
           "describe_run", "open_calibration", "prose_note", "return_from_quarantine", "run", "score",
           "score_checkpoint"]
