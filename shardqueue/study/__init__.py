"""The queue experiment of the proposal: arms A (plain order, and the reference curve),
B (the queue) and C (random rejection at B's rate), two seeds each, one adoption rule.

    presets.py           the typed settings (StudyPreset: tiny, small, proxy64m) and their plans: shards, targets, FLOPs,
                         GPU-hours, data, disk and host memory against the stated node
    run.py               stage A once, the six runs, accounting, efficiency points, the verdict
    arms.py              the arms' runner variants (reference branches, fixed random, curve rule)
    accounting.py        trained targets per run from its decision log; control traces
    efficiency.py        D, efficiency points against arm A's reference curve, the per-axis equivalent
    reference_curve.py   where A's decay branches sit, the monotone curve from both seeds, its span
    adoption.py          the pre-registered adoption rule and its three verdicts
    findings.py          the proposal's questions: damage caught, clean false rejections, screen, compute
    curve_fit.py         the reference curve's fit and its identifiability check
    random_rejection.py  arm C's rejected positions, drawn from the seed
    non_english.py       the Polish selection axis, when the corpus has one
    report.py            report.md and summary.json (with its schema)
    figures.py           selection.png, control_b.png, screen_vs_rise.png, compute.png

The command line is queue/study.py.
"""
