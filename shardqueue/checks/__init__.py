"""What a finished run is checked and reported by.

    replay.py     reconstruct: replay the log, check every record and manifest
    reexecute.py  reconstruct --execute: run the queue again, compare every logged number with the log
    report.py     report.md, decisions.parquet/.csv
    control_figure.py  the control-curve figure (control_curves.png), drawn only where a report is written
    run_summary.py  queue_summary.json from the log, and a written one checked against it
"""
