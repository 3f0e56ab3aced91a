"""The training core's parts; train.py drives them, the queue and the GPU check use them too.

    config.py      TrainConfig: keys, defaults (the paper's), validation that names the bad key
    model.py       the supplied model (GPT), attention backends
    optim.py       the optimizers (AdamW and Muon) and their schedule
    optim_reference.py  the optimizers' steps one tensor at a time, op by op: the tests' reference
    trainer.py     one update over microbatches: model, optimizers, autocast, DDP, compile
    device.py      device choice and the CPU/CUDA settings every command line applies
    checkpoint.py  checkpoint files: atomic, verified before they are trusted, pruned; RNG states
    resume.py      checkpoint and resume of a process: the state parts, the folder guard, the refusals
    launch.py      torchrun (or any launcher) as a child that leaves no process behind
    mfu.py         peak FLOP/s of a device, for MFU
    bench.py       host-memory settings and the fixed cost per update, against references, as ratios
"""
