"""The scaler is built enabled by a flag named for bfloat16 and handed to the training
function as a parameter, whose autocast is bfloat16 under the same flag: reported where the
scaler is built."""

import torch
from torch.amp import GradScaler, autocast


def run(hps, net, loader, optim):
    scaler = GradScaler("cuda", enabled=hps.train.bf16_run)  # expect: AMP008
    for epoch in range(hps.train.epochs):
        train_and_evaluate(hps, net, loader, optim, scaler)


def train_and_evaluate(hps, net, loader, optim, scaler):
    for x, y in loader:
        with autocast("cuda", enabled=hps.train.bf16_run, dtype=torch.bfloat16):
            loss = net(x, y)
        optim.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optim)
        scaler.update()
