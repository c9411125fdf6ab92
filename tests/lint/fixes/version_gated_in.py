import torch

if hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()

backup = torch.amp.GradScaler("cuda") if TORCH_GE_2_4 else torch.cuda.amp.GradScaler()

try:
    fast = torch.amp.GradScaler(device="cuda")
except (AttributeError, TypeError):
    fast = torch.cuda.amp.GradScaler()

with torch.cuda.amp.autocast(enabled=True):
    pass
