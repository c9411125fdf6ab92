# Accelerate's clip_grad_norm_ unscales the gradients itself: an explicit
# unscale_gradients() right before it unscales twice (RuntimeError under fp16).
from accelerate import Accelerator

accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)


def update(max_norm):
    if max_norm is not None:
        accelerator.unscale_gradients(optimizer)  # expect: AMP010
        accelerator.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()


def update_clip_only(max_norm):
    accelerator.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()


def update_unscale_to_read_norms():
    accelerator.unscale_gradients(optimizer)
    norms = [p.grad.norm() for p in model.parameters()]
    optimizer.step()
    optimizer.zero_grad()
    return norms
