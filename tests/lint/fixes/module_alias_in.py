from torch.cuda import amp
import torch.cpu.amp as cpu_amp

scaler = amp.GradScaler(enabled=True)
with amp.autocast():
    pass
with cpu_amp.autocast():
    pass
