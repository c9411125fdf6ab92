"""The autocast dtype is a parameter that a call of the file passes torch.bfloat16, and the
scaler is enabled by the same flag as the autocast: with that dtype the scaler scales a
bfloat16 loss (AMP008, when `enable_amp` is true and `amp_dtype` is torch.bfloat16)."""

import torch


def fit(model, loader, optimizer, enable_amp: bool, amp_dtype: torch.dtype):
    scaler = torch.amp.GradScaler("cuda", enabled=enable_amp)
    for x, y in loader:
        with torch.autocast("cuda", dtype=amp_dtype, enabled=enable_amp):
            loss = model(x, y)
        scaler.scale(loss).backward()  # expect: AMP008
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def fit_fp16_scaled(model, loader, optimizer, enable_amp: bool, amp_dtype: torch.dtype):
    # enabled for float16 only: never paired with the bfloat16 the caller may pass
    scaler = torch.amp.GradScaler("cuda", enabled=enable_amp and amp_dtype == torch.float16)
    for x, y in loader:
        with torch.autocast("cuda", dtype=amp_dtype, enabled=enable_amp):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def main(model, loader, optimizer):
    fit(model, loader, optimizer, enable_amp=True, amp_dtype=torch.bfloat16)
    fit_fp16_scaled(model, loader, optimizer, enable_amp=True, amp_dtype=torch.bfloat16)
