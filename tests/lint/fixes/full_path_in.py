import torch as th

label = "café ☕"; ctx = th.cuda.amp.autocast(enabled=use_amp)
scaler = th.cuda.amp.GradScaler()
with th.cpu.amp.autocast(dtype=th.bfloat16):
    pass
with th.cuda.amp.autocast(*args):  # not fixable: starred arguments
    pass
