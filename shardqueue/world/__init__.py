"""The world a queue run works in: the prepared corpus as the queue sees it, the frozen pool and the sources in it.

    corpus_view.py   World: the training stream with its labels, the control and selection sets
    pool.py          the frozen pool (pool.json): calibration, reserve, candidate, decay and planted shards
    domains.py       control and selection domains (defined in one place), BPB, 13-gram overlap
    rotation.py      document-aligned shards, SHA256s, seeded order, frozen manifests
    harmful.py       the harmful source: real documents with a corrupted token mapping
    damage.py        realistic text-level damage (mojibake, boilerplate, line_shuffle, truncate)
    damaged_pool.py  pool shards holding that damage at natural doses (the study's presets)
    sources.py       a new source added to a run (run --add-source NAME=PATH), replayed by reconstruct
    inspection.py    the inspection report of a quarantined shard
"""
