# unscale_ runs on every micro-step, step/update only every N: the second micro-step
# raises "unscale_() has already been called on this optimizer since the last update()".
import torch

scaler = torch.amp.GradScaler("cuda")

for i, batch in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = net(batch) / accumulation
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # expect: AMP010
    torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm)
    if (i + 1) % accumulation == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_epoch(net, optimizer, scaler, batches, cfg):
    for idx, batch in enumerate(batches):
        loss = net(batch) / cfg.accumulation
        scaler.scale(loss).backward()
        if cfg.clip:
            scaler.unscale_(optimizer)  # expect: AMP010
            torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.clip)
        if (idx + 1) % cfg.accumulation == 0:
            scaler.step(optimizer)
            optimizer.zero_grad()
            scaler.update()


def counter_guard(net, optimizer, scaler, batches, every):
    since = 0
    for batch in batches:
        scaler.scale(net(batch) / every).backward()
        scaler.unscale_(optimizer)  # expect: AMP010
        since += 1
        if since == every:
            scaler.step(optimizer)
            scaler.update()
            since = 0


# guarded by the same condition, or only by a setting that never changes: fine
def good(net, optimizer, scaler, batches, cfg):
    for idx, batch in enumerate(batches):
        scaler.scale(net(batch) / cfg.accumulation).backward()
        if (idx + 1) % cfg.accumulation == 0:
            if cfg.clip:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def good_flags(net, optimizer, scaler, batches, use_amp):
    for batch in batches:
        scaler.scale(net(batch)).backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
