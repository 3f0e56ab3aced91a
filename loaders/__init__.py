"""The document stream, the shared buffer core and the four packers (docs/baseline.md, "Packing: the four loaders").

    stream.py     the document stream in the supplied baseline's order (refills of 128, passes)
    core.py       the buffer core all four packers and the audit share, on lengths alone: decisions only
    kernel.py     the core's compiled loop (numba, cached): buckets, heaps, the protected set, in numpy arrays
    packers.py    the four packers as token loaders: the core's events turned into rows and records
    batches.py    microbatches for training: (inputs, targets) tensors from a packer
    reference.py  the references, for the tests and benches: the literal list scan, and the Python core of before
    bench.py      rows/s of each packer against the literal reference
"""
