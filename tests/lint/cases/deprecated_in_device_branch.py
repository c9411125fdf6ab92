"""The deprecated spelling in a device branch runs on every torch (the new API is in the
other arm because the device differs, not the release): reported."""

import torch


def autocast_for(device, dtype):
    if device == "cpu":
        return torch.cpu.amp.autocast(dtype=dtype)  # expect: AMP006
    elif device == "cuda":
        return torch.amp.autocast("cuda", dtype=dtype)
    return torch.autocast(device, dtype=dtype)
