"""Small offline checkers that recompute published numbers from exported files. They import nothing of
the project (two use only the standard library and run as `python3 -I -S`; the others need numpy), so they can be held
against the code that produced the files.

    packing_checker.py            the four packers written again (literal and bucketed); --events re-checks an audit export
    check_length_histogram.py     census totals and the repeated-corpus pass bounds ceil(B / r)
    verify_window_evidence.py     the source-window tables recomputed from the evidence file (numpy)
    verify_evaluation_summary.py  the prefix rankings and subset intervals recomputed from the evidence (numpy)
    verify_confirmation.py        each run's 5.4 CE, BPB, perplexity and the table's deltas recomputed from the
                                  per-row evidence (confirmation_evidence.npz), held against confirmation.json and report.md (numpy)
"""
