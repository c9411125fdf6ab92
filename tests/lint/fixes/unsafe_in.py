from torch.cuda.amp import autocast, custom_fwd

ctx_factory = autocast
with autocast():
    pass
