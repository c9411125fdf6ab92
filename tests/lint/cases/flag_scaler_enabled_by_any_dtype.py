"""The scaler is enabled whenever an autocast dtype is set (`amp_dtype is not None`), and the
autocast runs in that dtype: with amp_dtype=torch.bfloat16 the scaler scales a bf16 loss.
Reported with the dtype that makes it so."""

from torch.amp import GradScaler, autocast


def fit(model, loader, task, args, device):
    enable_amp = args.amp_dtype is not None
    scaler = GradScaler(enabled=enable_amp)
    for batch in loader:
        model.zero_grad(set_to_none=True)
        with autocast(device_type=device.type, enabled=enable_amp, dtype=args.amp_dtype):
            loss = task.compute_loss(batch, model)
        scaler.scale(loss).backward()  # expect: AMP008
