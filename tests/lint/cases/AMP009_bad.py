import torch

half = torch.float16
with torch.autocast("cpu", dtype=torch.float16):  # expect: AMP009
    out = model(x)
with torch.autocast(device_type="cpu", dtype=half):  # expect: AMP009
    out = model(x)
