"""The same closure with a float16 autocast: the scaler is needed, nothing to report."""

import torch


def main(model, loader, optimizer, amp: bool = False):
    device = torch.device("cuda")
    autocast_ctx = torch.autocast(device_type=device.type, dtype=torch.float16, enabled=amp)
    scaler = torch.amp.GradScaler(device=device.type, enabled=amp)

    def run_epoch():
        for x in loader:
            with autocast_ctx:
                loss = model(x).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    run_epoch()
