from torch import amp
import torch.amp as cpu_amp

scaler = amp.GradScaler("cuda", enabled=True)
with amp.autocast("cuda"):
    pass
with cpu_amp.autocast("cpu"):
    pass
