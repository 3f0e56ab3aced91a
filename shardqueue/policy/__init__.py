"""What decides which shards a queue run keeps; the engine (engine/) carries out its decisions the same way
under every policy.

    protocol.py    Policy: flag a candidate, judge a recovery, and (the rule's) judge a branch check
    rule.py        the rule, the recovery criterion, calibration on transitions held out of sigma (the fixed judge)
    measured.py    the proposal's rule as a policy, and its curve-guided variant (residuals from frozen curves)
    unmeasured.py  plain order, random rejection, rejection at fixed positions
"""
