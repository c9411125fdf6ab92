try:
    from torch.amp import autocast
except ImportError:  # older torch
    from torch.cuda.amp import autocast  # not fixable: `autocast` is bound twice

with autocast(device_type="cuda"):  # not fixable: device_type already given
    pass
