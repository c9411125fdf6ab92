"""The fix: the scaler is enabled only when the autocast dtype is float16."""

import torch
from torch.amp import GradScaler, autocast


def fit(model, loader, task, args, device):
    enable_amp = args.amp_dtype is not None
    scaler = GradScaler(enabled=args.amp_dtype == torch.float16)
    for batch in loader:
        model.zero_grad(set_to_none=True)
        with autocast(device_type=device.type, enabled=enable_amp, dtype=args.amp_dtype):
            loss = task.compute_loss(batch, model)
        scaler.scale(loss).backward()
