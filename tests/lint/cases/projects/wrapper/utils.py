import torch


def autocast_ctx(dtype, enabled=True):
    return torch.autocast("cuda", dtype=dtype, enabled=enabled)
