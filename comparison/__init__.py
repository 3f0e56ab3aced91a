"""The paper's matched comparison, run end to end (it stands above train.py, eval/ and audit/, which it drives).

    run_six.py   train and score the six configs in turn; the section 5.3 table, regime and figures
    freeze.py    freeze the comparison protocol (protocols/protocol.py) before any confirmation pass
    figures.py   the six runs' learning curves and official BPB by condition beside the paper's
"""
