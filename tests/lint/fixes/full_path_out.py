import torch as th

label = "café ☕"; ctx = th.amp.autocast("cuda", enabled=use_amp)
scaler = th.amp.GradScaler("cuda")
with th.amp.autocast("cpu", dtype=th.bfloat16):
    pass
with th.cuda.amp.autocast(*args):  # not fixable: starred arguments
    pass
