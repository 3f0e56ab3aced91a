"""The queue experiment of the proposal: arms A (plain order, and the reference curve),
B (the queue) and C (random rejection, as many times as B rejected), the proposal's two seeds
or as many as stage A's noise asks for, one adoption rule with paired intervals beside it.

    presets.py           the typed settings (StudyPreset: tiny, small, planned, proxy64m) and their plans:
                         shards, targets, FLOPs, GPU-hours, data, disk and host memory against the stated node
    run.py               stage A once, the seed plan, three runs per seed, accounting, efficiency points, the verdict
    arms.py              the arms as run plans of the one runner; arm A's reference branches (an observer)
    accounting.py        trained targets and costs per run from its decision log; control traces
    efficiency.py        D, efficiency points against arm A's reference curve, the per-axis equivalent
    reference_curve.py   where A's decay branches sit, the monotone curve of the seeds, each seed's
                         leave-one-out curve, their span
    adoption.py          the pre-registered adoption rule, the paired intervals and the four verdicts
    intervals.py         Student's t quantile, the paired interval, seed spreads over pairs
    power.py             the seeds per arm planned from stage A's noise
    findings.py          the proposal's questions: damage caught, clean false rejections, screen, compute
                         per run and per arm
    curve_fit.py         the reference curve's fit and its identifiability check
    random_rejection.py  arm C's rejected positions: B's count, drawn from the seed where C reaches them
    non_english.py       the Polish selection axis, when the corpus has one
    report.py            report.md and summary.json (with its schema)
    figures.py           selection.png, control_b.png, screen_vs_rise.png, compute.png
    dose.py              dose-response: flag/reject rate against the exact harmful share of a shard (--harm)
    footprint.py         peak host memory and disk of a preset's plan, term by term (host_footprint)

The command line is queue/study.py.
"""
