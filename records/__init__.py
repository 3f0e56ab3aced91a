"""Typed records of what the stages write, each with its own loader: the one place a stage's JSON is read by
its keys. A record with a schema refuses another version in one line naming the file.

    json_record.py  reading a JSON record: its schema checked first, then exactly its dataclass's keys
                    (from_mapping) or at least them (picked); StageFile: load and write of one stage's file
    queue_run.py    RunSummary: a queue run's queue_summary.json (queue-run/1)
    reexecution.py  Reexecution: what `reconstruct --execute` found (reexecution.json)
    study.py        StudySummary: the queue study's summary.json (queue-study/5) and its key schema
    training.py     TrainedRun, SourceFilter: a training run's summary.json and the train stage's filter, as read
    evaluation.py   Confirmation, WindowSummary, Rankings: the evaluation's results, as read
    audit_summary.py  AuditSummary: an audit's summary.json (audit-summary/1), each packer's and a topology's
    audit_comparison.py  Comparison: an audit's table across packers, comparison.json (audit-comparison/1)
    frontier.py     Frontier: a --sweep's frontier.json (audit-frontier/2)
    provenance.py   what ran (code, software, hardware, corpus, date, times, size): the one place it is collected
"""
