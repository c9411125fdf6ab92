import torch
import torch.cuda.amp.grad_scaler as gs
from torch.cuda.amp import autocast_mode, grad_scaler
from torch.cuda.amp.autocast_mode import autocast, custom_fwd
from torch.cuda.amp.grad_scaler import GradScaler


class Square(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * x


scaler = GradScaler()
other = gs.GradScaler(init_scale=1024)
third = grad_scaler.GradScaler(enabled=False)
full = torch.cuda.amp.grad_scaler.GradScaler()
with autocast(enabled=False):
    pass
with autocast_mode.autocast(dtype=torch.float16):
    pass
with torch.cpu.amp.autocast_mode.autocast():
    pass
