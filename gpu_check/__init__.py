"""The one GPU check: the real train.py, official scoring, resume, queue shards and DDP on a device
(python -m gpu_check). It drives the training core, eval/ and the queue, so it stands above them all.

    __main__.py  the command line: parts to run, the table, gpu_check.json
    parts.py     the parts, each returning pass/fail rows with their numbers
"""
