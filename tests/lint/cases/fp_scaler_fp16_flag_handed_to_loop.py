"""The same hand-over with a scaler enabled by a flag named for float16: the scaler is
needed there, nothing to report."""

import torch
from torch.amp import GradScaler, autocast


def run(hps, net, loader, optim):
    scaler = GradScaler("cuda", enabled=hps.train.fp16_run)
    for epoch in range(hps.train.epochs):
        train_and_evaluate(hps, net, loader, optim, scaler)


def train_and_evaluate(hps, net, loader, optim, scaler):
    for x, y in loader:
        with autocast("cuda", enabled=hps.train.fp16_run, dtype=torch.float16):
            loss = net(x, y)
        optim.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optim)
        scaler.update()
