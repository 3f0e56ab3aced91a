"""The document stream, the shared buffer core and the four packers (docs/baseline.md, "Packing: the four loaders").

    stream.py     the document stream in the supplied baseline's order (refills of 128, passes)
    core.py       the buffer core all four packers share, on lengths alone: decisions only
    packers.py    the four packers as token loaders: the core's events turned into rows and records
    batches.py    microbatches for training: (inputs, targets) tensors from a packer
    reference.py  slow, literal reference packers (a list scanned exactly as the rules read), for the tests
    bench.py      rows/s of each packer against the literal reference
"""
