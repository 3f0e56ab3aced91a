"""Small offline checkers that recompute published numbers from exported files. They import nothing of
the project (three use only the standard library and run as `python3 -I -S`), so they can be held
against the code that produced the files.

    packing_checker.py            the four packers written again (literal and bucketed); --events re-checks an audit export
    check_length_histogram.py     census totals and the repeated-corpus pass bounds ceil(B / r)
    verify_window_evidence.py     the source-window tables recomputed from the evidence file (numpy)
    verify_evaluation_summary.py  the prefix rankings and subset intervals recomputed from the evidence (numpy)
    verify_confirmation.py        the 5.4 table against confirmation.json's totals (not its per-row parquet)
"""
