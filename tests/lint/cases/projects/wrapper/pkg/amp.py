from contextlib import contextmanager

import torch


@contextmanager
def mixed(device="cuda"):
    with torch.autocast(device, dtype=torch.float16):
        yield
