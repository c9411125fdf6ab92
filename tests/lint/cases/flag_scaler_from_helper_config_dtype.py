"""The dtype is picked from a config option (compared after ``.lower()``) and the scaler is
handed back by a helper with the optimizer: when the option says bfloat16, the scaler runs
with a bfloat16 region."""

import torch


def init_opt(model, mixed_precision):
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda") if mixed_precision else None
    return optimizer, scaler


def main(args, model, loader):
    cfgs_meta = args.get("meta")
    which_dtype = cfgs_meta.get("dtype")
    if which_dtype.lower() == "bfloat16":
        dtype = torch.bfloat16
        mixed_precision = True
    elif which_dtype.lower() == "float16":
        dtype = torch.float16
        mixed_precision = True
    else:
        dtype = torch.float32
        mixed_precision = False
    optimizer, scaler = init_opt(model, mixed_precision=mixed_precision)
    for x in loader:
        with torch.autocast("cuda", dtype=dtype, enabled=mixed_precision):
            loss = model(x).mean()
        if mixed_precision:
            scaler.scale(loss).backward()  # expect: AMP008
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
