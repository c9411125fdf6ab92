"""The autocast dtype is an option whose choices include float16, and nothing scales the
loss: `--amp-dtype float16` trains unscaled (AMP002, when `amp_dtype` is 'float16')."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--amp-dtype", default="bfloat16", choices=["bfloat16", "float16"])
args = parser.parse_args()

optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.amp_dtype)):  # expect: AMP002
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
