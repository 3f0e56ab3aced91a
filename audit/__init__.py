"""The exact CPU audit (the paper's practical contribution): which sources a packer emits, discards,
keeps buffered or never starts, which positions of them it trains on, for the paper's four packers
(replayed) and any other packer (traced). `python -m audit`; from Python, audit.api.

    __main__.py      the command line: arguments, the plan, then run.py
    plan.py          AuditPlan: what the command line asked for, built once and checked (each bad value one line)
    run.py           what the command line does with its plan: read the stream, fix the budget, audit, report
    out_folder.py    what --out may be (it is replaced whole), and what an audit that ended early left beside it
    sweep.py         --sweep: the frontier of crop waste against long documents never started, one replay a setting
    api.py           the audit from Python: trace your own packer on your corpus's lengths
    pipeline.py      one audit: a stream, a budget and packers -> summary, events and figures in a folder
    compute.py       the mechanism: one packer over one stream at one budget -> its summary
    replay.py        replay a length stream in memory through a packer (the code that trains) up to a target budget
    topology.py      N ranks x M loader workers: a stream split into worker shares, each audited alone, merged
    loader_presets.py  --pipeline NAME: a named loader's packer, split, and who owns a buffer
    feed.py          refills pulled on demand, in windows for the compiled core: memory is the buffer and a window
    trace.py         run any packer on tracer documents and decode its rows into the replay's events
    fates.py         the trace's emissions resolved and tallied a range of sources at a time, from disk
    fate_table.py    fates_<packer>.parquet: one row per input document, its fate at the horizon; documents counted
    spill.py         tables as long as the stream (documents, decoded emissions) on disk, read back by range
    adapters.py      packers to trace: ours, concatenate-and-chunk, TRL, OLMo-core, torchtune, torchtitan
    libraries/       the loaders most pretraining runs on: Megatron-Core and Grain (their code), llm-foundry,
                     LLaMA-Factory and axolotl (rules from their code); --loader-arg (its own module map)
    events.py        the event schema the replay and the trace share, and its writers
    tally.py         every table of one packer's audit, accumulated chunk by chunk (its sums over events compiled)
    metrics.py       the same tables from an in-memory replay; the repeated-corpus pass bounds
    strata.py        the source-length strata of the paper's tables
    proposition.py   the Proposition of section 3, checked at every selection
    regime.py        regime indicators: is a (corpus, R, B, budget) setting in the paper's regime?
    synthetic.py     a synthetic length stream shaped like the paper's census
    lengths_file.py  a researcher's own length stream: text, refill lines, .npy or a parquet column
    report.py        report.md, written from the summary (nothing computed there)
    compare.py       one table across packers at one budget (and who stopped short of it), and its headline
    plots.py         the figures (matplotlib, PNG)
    frontier_figure.py  frontier.png: the --sweep's points, numbered, labels placed where they cover no other, a key
    fmt.py           number formats and Markdown tables shared by the report and the comparison
    bench.py         benchmarks: paper-scale replay, trace decoding against each library, scale, checker
"""
