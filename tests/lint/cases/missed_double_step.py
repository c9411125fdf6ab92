# The weights are updated twice per iteration in AMP mode, or clipped after the update.
import torch


def train(net, optimizer, scaler, batches, cfg):
    for batch in batches:
        with torch.autocast("cuda", enabled=cfg.amp):
            loss = net(batch)
        if cfg.amp:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
        optimizer.step()  # expect: AMP015
        optimizer.zero_grad()


def clip_too_late(net, optimizer, scaler, batches):
    for batch in batches:
        scaler.scale(net(batch)).backward()
        scaler.step(optimizer)
        scaler.update()
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)  # expect: AMP016
        log(norm)
        optimizer.zero_grad()
