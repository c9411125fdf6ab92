"""The same helper and config when the scaler is used only on the float16 choice:
nothing to report."""

import torch


def init_opt(model, use_scaler):
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None
    return optimizer, scaler


def main(args, model, loader):
    cfgs_meta = args.get("meta")
    which_dtype = cfgs_meta.get("dtype")
    if which_dtype.lower() == "bfloat16":
        dtype = torch.bfloat16
        use_scaler = False
    elif which_dtype.lower() == "float16":
        dtype = torch.float16
        use_scaler = True
    else:
        dtype = torch.float32
        use_scaler = False
    optimizer, scaler = init_opt(model, use_scaler=use_scaler)
    for x in loader:
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            loss = model(x).mean()
        if use_scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
