import torch
import torch.amp.grad_scaler as gs
from torch.amp import autocast_mode, grad_scaler
from torch.amp import autocast, custom_fwd
from torch.amp import GradScaler


class Square(torch.autograd.Function):
    @staticmethod
    @custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * x


scaler = GradScaler("cuda")
other = gs.GradScaler("cuda", init_scale=1024)
third = grad_scaler.GradScaler("cuda", enabled=False)
full = torch.amp.GradScaler("cuda")
with autocast("cuda", enabled=False):
    pass
with autocast_mode.autocast("cuda", dtype=torch.float16):
    pass
with torch.amp.autocast("cpu"):
    pass
