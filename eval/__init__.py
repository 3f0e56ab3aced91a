"""Evaluation: the official metric, source windows, position bins, paired bootstraps, rankings, and the
gates before a confirmation pass. The command lines are `python -m eval` and `python -m eval.official`.

    __main__.py       evaluate finished runs: windows, confirmation, comparisons, rankings, evidence files
    official.py       the official validation metric (the supplied baseline's evaluation) of a checkpoint
    scoring.py        per-row, per-position-bin sufficient statistics of a model on fixed inputs
    plan.py           every parameter of an evaluation in one dict: what a frozen protocol pins down
    runs.py           which runs an evaluation has: finished ones, configured ones that are absent
    windows.py        the source-window diagnostic (section 4, "Evaluation populations")
    confirmation.py   the confirmation population: validation rows a:b without exact duplicates
    stream_checks.py  each evaluation stream audited by the CPU replay before any scoring
    compare.py        beginning/tail deltas, interactions, paired-source bootstrap, position-bin contributions
    rankings.py       rankings of several checkpoints at prefixes and in full (section 5.6)
    rescore.py        the gate: every checkpoint's official rows reproduce exactly (gpu_check judges with it too)
    figures.py        the evaluation's figures, drawn from the summaries the report prints

The frozen protocol's checks are protocols/protocol.py."""
