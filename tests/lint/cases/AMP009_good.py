import torch

with torch.autocast("cpu", dtype=torch.bfloat16):
    out = model(x)
with torch.autocast("cpu"):
    out = model(x)
with torch.autocast("cuda", dtype=torch.float16):
    out = model(x)
