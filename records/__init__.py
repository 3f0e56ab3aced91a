"""Typed records of what the stages write, each with its own loader: the one place a stage's JSON is read by
its keys. A record with a schema refuses another version in one line naming the file.

    json_record.py  reading a JSON record whole: exactly its dataclass's keys, its schema checked
    queue_run.py    RunSummary: a queue run's queue_summary.json (queue-run/1)
    reexecution.py  Reexecution: what `reconstruct --execute` found (reexecution.json)
    study.py        StudySummary: the queue study's summary.json (queue-study/4) and its key schema
"""
