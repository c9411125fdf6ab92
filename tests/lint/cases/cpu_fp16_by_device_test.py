"""The autocast arguments are a dict passed as **kwargs, its dtype picked by a test of the
device: float16 exactly when the device is the CPU (the arms swapped by mistake). Reported at
each autocast that reads the dict, with the flag that turns it on."""

import torch


def greedy(model, src, max_len, **kwargs):
    device = src.device
    fp16 = kwargs.get("fp16", False)
    autocast = {"device_type": device.type, "enabled": fp16}
    if fp16:
        autocast["dtype"] = torch.float16 if device.type == "cpu" else torch.bfloat16
    out = src
    for _ in range(max_len):
        with torch.autocast(**autocast):  # expect: AMP009
            out = model(out)
    return out


def encode(model, src, device, half):
    dtype = torch.float16 if half else torch.bfloat16
    with torch.autocast(device_type="cpu" if device == "cpu" else "cuda", dtype=dtype):  # expect: AMP009
        return model(src)
