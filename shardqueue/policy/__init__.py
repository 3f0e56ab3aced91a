"""What decides: the proposal's rule and the other policies a queue run can follow.

    rule.py    the rule, the recovery criterion, calibration on transitions held out of sigma (the fixed judge)
"""
