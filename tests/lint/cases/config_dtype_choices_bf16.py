"""The autocast dtype is an option whose only choices are bfloat16 and float32 (one of them
even written as a float16 arm the option never selects): no scaler is needed."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
parser.add_argument("--amp-dtype", default="bfloat16", choices=["bfloat16", "float32"])
args = parser.parse_args()

optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.amp_dtype)):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
for x, y in loader:
    with torch.autocast("cuda", dtype=dtype, enabled=args.precision != "fp32"):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
