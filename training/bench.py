#!/usr/bin/env python3
"""Benchmarks of training's fixed costs, each side against a reference measured in the same run.

host-memory: a tiny CPU training run with freed host memory kept and huge pages for large
tensors (what configure("cpu") does, training/device.py) against glibc's and torch's
defaults, under which every allocation over 32 MB is mapped afresh. Each side is the same
train.py command in its own process, run --repeats times in turn. The reference sets
THP_MEM_ALLOC_ENABLE=0, a user's choice that configure then leaves alone, so nothing is
changed. Prints wall seconds, system seconds and peak RSS per side (medians) and their ratios
to the reference, and checks that every run ends at the same official BPB (the settings move
no number).

update-cost: the part of one update that does not grow with the batch: the optimizer steps
and the update's record (loss and microbatch fingerprints: collectives and host syncs). The
paper's parameter layout (8 layers: 52 Muon matrices in 4 shapes, 8 AdamW tensors, bf16
embeddings) at width 32, so that the time is per-op overhead, not arithmetic. Sides: the
per-parameter reference steps (training/optim_reference.py: one Python step per parameter)
against the batched steps training uses, and the record as trainer.update kept it before
(a float64 all-reduce, .item(), a copy of the fingerprints, train.py's all_gather_object and
torch.cuda.synchronize) against now (one all_gather_single, one copy), on a one-process Gloo
group. Prints milliseconds per update (median; at this width mostly CPU bf16 arithmetic, so
the op counts are the better guide to a GPU), device ops per update (aten ops on device
tensors, views excluded, counted on the meta device; on a GPU each is a kernel launch, the
fixed cost of a small model's update), the record's collectives and host syncs (calls that
wait for the device on a GPU: .item(), .cpu(), synchronize), each with the ratio reference /
training. Checks that both optimizer sides end bitwise equal and that both records carry the
same fingerprints. REPRODUCE.md's 8-GPU estimate uses these counts.

  python training/bench.py [--part host-memory|update-cost|all] [--data-dir DIR]
                           [--config protocols/configs/tiny/baseline_s43.json]
"""
import argparse
import copy
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_parser():
    ap = argparse.ArgumentParser(prog="python training/bench.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["host-memory", "update-cost", "all"], default="all")
    ap.add_argument("--config", default=str(ROOT / "protocols/configs/tiny/baseline_s43.json"))
    ap.add_argument("--data-dir", default=None, help="data root with a prepared stdlib corpus (default: the usual one)")
    ap.add_argument("--repeats", type=int, default=3, help="host-memory: runs per side; update-cost: x10 steps")
    return ap


if __name__ == "__main__":  # --help and a bad option are answered before torch's import (seconds), as in train.py
    build_parser().parse_args()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

sys.path.insert(0, str(ROOT))  # run as a script: the repository's packages

from errors import DataError  # noqa: E402
from records.training import FinishedRun  # noqa: E402
from training.config import resolve_config  # noqa: E402
from training.model import GPT, ModelConfig  # noqa: E402
from training.optim import build_optimizers  # noqa: E402
from training.optim_reference import ReferenceAdamW, ReferenceMuon  # noqa: E402
from training.trainer import microbatch_check, pack_update, unpack_updates  # noqa: E402

SIDES = {"reference": {"THP_MEM_ALLOC_ENABLE": "0"},  # the defaults: configure("cpu") changes nothing
         "heap kept + huge pages": {}}  # what every command line does on CPU


def one_run(config, data_dir, out, side):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "THP_MEM_ALLOC"))}
    env.update(SIDES[side])
    cmd = [sys.executable, str(ROOT / "train.py"), "--config", config, "--out", str(out), "--overwrite"]
    if data_dir:
        cmd.append(f"data_dir={data_dir}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(f"error: train.py failed: {r.stderr.strip().splitlines()[-1:]}")
    # ru_maxrss of children is the largest of any child so far: read the run's own peak instead
    run = FinishedRun.read(Path(out) / "summary.json")
    return {"wall": wall, "sys": after.ru_stime - before.ru_stime, "peak_mib": run.peak_memory_mib, "bpb": run.bpb}


def host_memory(a):
    runs = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            for k, side in enumerate(SIDES):
                runs[side].append(one_run(a.config, a.data_dir, Path(tmp) / f"run_{k}_{i}", side))
    med = {side: {k: statistics.median(r[k] for r in rs) for k in ("wall", "sys", "peak_mib")} for side, rs in runs.items()}
    same = len({r["bpb"] for rs in runs.values() for r in rs}) == 1
    ref = med["reference"]
    print(f"{'':<26} {'wall s':>7} {'system s':>9} {'peak MiB':>9}   ratios to the reference: wall, system, peak")
    for side, m in med.items():
        print(f"{side:<26} {m['wall']:>7.1f} {m['sys']:>9.1f} {m['peak_mib']:>9.0f}   {m['wall'] / ref['wall']:.2f}, "
              f"{m['sys'] / max(ref['sys'], 1e-9):.2f}, {m['peak_mib'] / ref['peak_mib']:.2f}")
    print(f"official BPB equal on every run: {'yes' if same else 'NO'}")
    return same


# ---- update-cost --------------------------------------------------------------------------
LAYOUT = ModelConfig(sequence_len=64, vocab_size=64, n_layer=8, n_embd=32, n_head=4, n_kv_head=4, short_window=32)


class DeviceOps(TorchDispatchMode):
    """Counts aten ops that are not views (on a GPU: kernel launches)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += not func.is_view
        return func(*args, **(kwargs or {}))


def optimizer_sides(device):
    """{side: step function} on a model of LAYOUT on device, every parameter with a gradient;
    both sides start from the same parameters and gradients."""
    torch.manual_seed(0)
    model = GPT(LAYOUT).to(device)
    if device != "meta":
        model.init_weights()
    model.embeddings_to_bf16()
    ref = copy.deepcopy(model)
    for m in (model, ref):
        g = torch.Generator().manual_seed(1)
        for p in m.parameters():
            p.grad = torch.randn(p.shape, generator=g).to(device, p.dtype)
    adamw, muon = build_optimizers(model)
    ref_adamw = ReferenceAdamW(build_optimizers(ref)[0].param_groups, eps=1e-10)
    ref_muon = ReferenceMuon([p for p in ref.blocks.parameters() if p.ndim == 2], lr=0.04, momentum=0.95,
                             weight_decay=0.2)
    sides = {"AdamW, per tensor (reference)": ref_adamw.step, "AdamW, foreach (training)": adamw.step,
             "Muon, per matrix (reference)": ref_muon.step, "Muon, stacked per shape (training)": muon.step}
    return sides, (model, ref)


def cuda_synchronize():
    """train.py's torch.cuda.synchronize() after each update, before: nothing to wait for on CPU."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def record_before(total, checks, world):
    """The update's record as trainer.update and train.py kept it before one collective carried it
    (the all-reduce ran with 2+ ranks; here on the one-process group, so that it is counted)."""
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    loss = total.item()
    mine = [int(c) for c in torch.stack(checks).cpu()]
    cuda_synchronize()
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    return loss, gathered


def record_after(total, checks, world):
    record = pack_update(total, checks)
    gathered = record.new_empty(world * record.numel())
    dist.all_gather_single(gathered, record)
    return unpack_updates(gathered.view(world, -1).cpu())


class Waits:
    """Counts, while active, the collectives (all_reduce, all_gather, all_gather_single, also those
    inside all_gather_object) and the host syncs: .item() and .cpu() (on a GPU each copies from the
    device and waits for it; all_gather_object calls both) and cuda_synchronize. Only calls are
    counted, so a one-process CPU group shows what a GPU rank would wait for."""

    COLLECTIVES = ("all_reduce", "all_gather", "all_gather_single")

    def __enter__(self):
        self.collectives = self.syncs = 0
        self.saved = []

        def counting(owner, name, kind):
            real = getattr(owner, name)

            def call(*a, **kw):
                setattr(self, kind, getattr(self, kind) + 1)
                return real(*a, **kw)
            self.saved.append((owner, name, real))
            setattr(owner, name, call)

        for owner in {dist, c10d}:
            for name in self.COLLECTIVES:
                counting(owner, name, "collectives")
        for name in ("item", "cpu"):
            counting(torch.Tensor, name, "syncs")
        counting(sys.modules[__name__], "cuda_synchronize", "syncs")
        return self

    def __exit__(self, *exc):
        for owner, name, real in reversed(self.saved):
            setattr(owner, name, real)


def median_ms(fn, repeats):
    fn()  # warm-up (state allocation)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def optimizer_rows(repeats):
    """{side: [CPU ms, device ops]} of the optimizer steps (ops counted on meta), and whether the
    two sides end bitwise equal."""
    rows = {}
    sides, _ = optimizer_sides("meta")
    for name, step in sides.items():
        step()  # state
        with DeviceOps() as count:
            step()
        rows[name] = [None, count.ops]
    sides, (model, ref) = optimizer_sides("cpu")
    for name, step in sides.items():
        rows[name][0] = median_ms(step, repeats)
    return rows, all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters()))


def record_rows(repeats):
    """{side: [CPU ms, device ops, collectives, host syncs]} of the update's record, before and
    after, on a one-process Gloo group, and whether both carry the same fingerprints."""
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 64, (4, 2, 65), generator=g)
    checks = [microbatch_check(b[:, :-1], b[:, 1:]) for b in x]
    total = torch.tensor(12.375, dtype=torch.float64)
    rows = {}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for name, fn in {"record, before (all-reduce, .item(), .cpu(), all_gather_object, synchronize)": record_before,
                         "record, after (one all_gather_single, one .cpu())": record_after}.items():
            with DeviceOps() as count, Waits() as waits:
                fn(total.clone(), checks, 1)
            rows[name] = [median_ms(lambda: fn(total.clone(), checks, 1), repeats), count.ops, waits.collectives,
                          waits.syncs]
        same = record_before(total.clone(), checks, 1)[1][0] == record_after(total.clone(), checks, 1)[1][0]
    finally:
        dist.destroy_process_group()
    return rows, same


def ratio_table(rows, columns):
    """Rows in (reference, training) pairs, each training row followed by reference / training per column."""
    names = list(rows)
    print(f"{'':<78}" + "".join(f"{c:>11}" for c in columns) + "   ratios: reference / training")
    for ref_name, new_name in zip(names[::2], names[1::2]):
        for name in (ref_name, new_name):
            print(f"{name:<78}" + "".join(f"{v:>11.3f}" if isinstance(v, float) else f"{v:>11}" for v in rows[name]),
                  end="")
            print("   " + ", ".join(f"{r / max(n, 1e-12):.2f}" for r, n in zip(rows[ref_name], rows[name]))
                  if name == new_name else "")


def update_cost(a):
    torch.set_num_threads(1)
    opt, equal = optimizer_rows(a.repeats)
    rec, same = record_rows(a.repeats)
    print(f"update-cost: {LAYOUT.n_layer} layers at width {LAYOUT.n_embd}, CPU, one thread; ratios are "
          f"reference / training side (how many times the reference costs)")
    ratio_table(opt, ["CPU ms", "ops"])
    ratio_table(rec, ["CPU ms", "ops", "collect.", "syncs"])
    ops = [sum(v[1] for v in list(opt.values())[i::2]) + list(rec.values())[i][1] for i in (0, 1)]
    print(f"device ops per update, optimizer steps and record: {ops[0]} -> {ops[1]} ({ops[0] / ops[1]:.2f}x fewer); "
          f"all_gather_object adds one host sync per rank: "
          f"{list(rec.values())[0][3] - 1 + 8} syncs on 8 ranks before, 1 now")
    print(f"optimizer sides bitwise equal after {a.repeats + 1} steps: {'yes' if equal else 'NO'}; "
          f"the records carry the same fingerprints: {'yes' if same else 'NO'}")
    return equal and same


def main(argv=None):
    a = build_parser().parse_args(argv)
    try:  # before the update-cost part's seconds of work: host-memory's config must be there and read
        if a.repeats < 1:
            raise DataError(f"--repeats {a.repeats}: must be at least 1")
        if a.part in ("host-memory", "all"):
            resolve_config(a.config, [f"data_dir={a.data_dir}"] if a.data_dir else [])
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ok = True
    if a.part in ("update-cost", "all"):
        ok &= update_cost(argparse.Namespace(repeats=10 * a.repeats))
    if a.part in ("host-memory", "all"):
        ok &= host_memory(a)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
