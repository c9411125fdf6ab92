"""A flag set when the dtype option is bfloat16 turns the scaler on: the scaler runs exactly
when the autocast is bfloat16 (AMP008, when `dtype` is 'bfloat16')."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bfloat16")
args = parser.parse_args()

dtype = args.dtype
mixed_precision = False
if dtype == "bfloat16":
    mixed_precision = True
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]

scaler = torch.amp.GradScaler("cuda") if mixed_precision else None
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=ptdtype):
        loss = model(x, y)
    if scaler is not None:
        scaler.scale(loss).backward()  # expect: AMP008
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad()
