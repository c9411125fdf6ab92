"""The fixed arms: bfloat16 on the CPU and float16 on CUDA, read through **kwargs or
arguments; the device and dtype tests never give float16 on the CPU."""

import torch


def greedy(model, src, max_len, **kwargs):
    device = src.device
    fp16 = kwargs.get("fp16", False)
    autocast = {"device_type": device.type, "enabled": fp16}
    if fp16:
        autocast["dtype"] = torch.bfloat16 if device.type == "cpu" else torch.float16
    out = src
    for _ in range(max_len):
        with torch.autocast(**autocast):
            out = model(out)
    return out


def encode(model, src, device):
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device_type="cpu" if device == "cpu" else "cuda", dtype=dtype):
        return model(src)


def infer(model, x, device_type):
    with torch.autocast(device_type=device_type, dtype=torch.float16):
        return model(x)


def fallback(model, x):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.autocast(device_type=device, dtype=torch.float16):
        return model(x)
