"""Peak dense bf16 FLOP/s of the device, for model FLOPs utilisation (MFU).

MFU = FLOPs per token x tokens per second / peak. The table holds vendor dense (not
sparse) bf16 tensor-core peaks; an unknown GPU gives None (MFU is then not reported rather
than computed against a guessed peak). CPUs have no meaningful peak here either.
"""
import platform

import torch

DENSE_BF16_PEAK = {  # substring of torch.cuda.get_device_name() -> FLOP/s; the longest match wins
    "H200": 989e12,
    "GH200": 989e12,
    "H100": 989e12,  # SXM ("NVIDIA H100 80GB HBM3")
    "H100 NVL": 835e12,
    "H100 PCIe": 756e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
    "RTX 4090": 165e12,
}


def device_name(device) -> str:
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"CPU ({platform.processor() or platform.machine()})"


def peak_flops(device):
    """Dense bf16 peak of this device in FLOP/s, or None when unknown (CPU, unlisted GPU)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    name = torch.cuda.get_device_name(dev)
    for key in sorted(DENSE_BF16_PEAK, key=len, reverse=True):  # "GH200" before "H200"
        if key in name:
            return DENSE_BF16_PEAK[key]
    return None
