"""Test helpers that read the CPU code as it would run on CUDA.

- fake_cuda(model): the model's parameters and buffers become FakeTensors on `cuda:0`
  (torch._subclasses.fake_tensor.FakeTensorMode). Torch's CUDA dispatch rules, CUDA
  autocast included, then run on a CPU-only build; no kernel runs. Forward only: the
  autograd engine needs a real CUDA device.
- cuda_autocast(): CUDA bf16 autocast switched on, the previous settings restored after.
- no_integer_matmul(): a TorchDispatchMode that fails on any matrix product with a
  non-floating operand (CUDA has no integer mm/addmm/bmm kernels; CPU has).
"""
import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _basic_getitem(t, idx):
    """t[idx] for ints, slices, None and Ellipsis, as aten ops: Python indexing of a tensor
    takes a CUDA device guard that a CPU-only build lacks, even for a FakeTensor."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    d = 0
    for i in [j for i in idx for j in ([slice(None)] * (t.dim() - used) if i is Ellipsis else [i])]:
        if i is None:
            t, d = aten.unsqueeze(t, d), d + 1
        elif isinstance(i, int):
            t = aten.select.int(t, d, i)
        elif isinstance(i, slice):
            t, d = aten.slice.Tensor(t, d, i.start, i.stop, i.step or 1), d + 1
        else:
            raise TypeError(f"fake_cuda: index {i!r} is not supported by this helper")
    return t


class _CudaIndexing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__ and args[0].device.type == "cuda":
            return _basic_getitem(*args)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def fake_cuda(model):
    """Yield the FakeTensorMode with every parameter, buffer and prepared attention mask of
    model moved to a fake `cuda:0`; gradients off (see the module docstring)."""
    real = [(mod, kind, name, t.detach()) for mod in model.modules() for kind in ("_parameters", "_buffers")
            for name, t in getattr(mod, kind).items() if t is not None]
    masks = getattr(getattr(model, "attend", None), "_masks", {})
    with FakeTensorMode() as mode, _CudaIndexing(), torch.no_grad():
        for mod, kind, name, t in real:
            f = mode.from_tensor(t).to("cuda:0")
            getattr(mod, kind)[name] = torch.nn.Parameter(f, requires_grad=False) if kind == "_parameters" else f
        mode.allow_non_fake_inputs = True  # only to carry masks built on CPU over (a flex mask cannot be built fake)
        for key in [k for k in masks if k[3] == "cpu"]:
            masks[key[:3] + ("cuda", 0)] = masks[key].to("cuda:0")
        mode.allow_non_fake_inputs = False
        yield mode


@contextlib.contextmanager
def cuda_autocast(dtype=torch.bfloat16):
    was, was_dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", was)
        torch.set_autocast_dtype("cuda", was_dtype)


MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "dot", "mv", "addmv", "vdot"}


class IntegerMatmul(AssertionError):
    pass


class no_integer_matmul(TorchDispatchMode):
    """Fails on a matrix product with an integer or boolean operand; counts the products seen."""

    def __init__(self):
        super().__init__()
        self.products = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name.split("::")[-1] in MATMULS:
            self.products += 1
            bad = [a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)
                   and not (a.dtype.is_floating_point or a.dtype.is_complex)]
            if bad:
                raise IntegerMatmul(f"{func} with operand dtypes {bad}: no CUDA kernel")
        return func(*args, **kwargs)


class CpuMeeting(AssertionError):
    pass


class meta_as_cuda(TorchDispatchMode):
    """Runs code whose model sits on `meta` as if meta were a CUDA device, and fails where a
    CUDA run would: an op that takes a meta tensor together with a CPU tensor of one or more
    dimensions (CUDA accepts 0-dim CPU scalars, and copies across devices). Meta tensors
    hold no values: item() gives 0 and a copy to the CPU gives zeros, so the code runs on.
    (Meta kernels alone do not check devices: embedding and linear accept CPU inputs.)"""

    CROSSING = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize"}

    def __init__(self):
        super().__init__()
        self.ops_on_meta = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        tensors = [a for a in _flat(args, kwargs) if isinstance(a, torch.Tensor)]
        on_meta = any(t.device.type == "meta" for t in tensors)
        if on_meta:
            self.ops_on_meta += 1
        if name == "_local_scalar_dense" and on_meta:
            return 0
        if name == "_to_copy" and on_meta and torch.device(kwargs.get("device") or "meta").type == "cpu":
            t = tensors[0]
            return torch.zeros(t.shape, dtype=kwargs.get("dtype") or t.dtype)
        if on_meta and name not in self.CROSSING:
            cpu = [tuple(t.shape) for t in tensors if t.device.type == "cpu" and t.dim() > 0]
            if cpu:
                raise CpuMeeting(f"{func} meets CPU tensors of shapes {cpu} with the model's device")
        return func(*args, **kwargs)


def _flat(args, kwargs):
    from torch.utils._pytree import tree_leaves

    return tree_leaves((args, kwargs))
