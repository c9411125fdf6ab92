"""The fix: the scaler is built only for float16; a bfloat16 flag turns it off or leaves it
unbuilt, and a flag that says nothing about the dtype is not judged."""

import torch


def main(trainer, model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda") if trainer.use_fp16 else None
    trainer.train(model, optimizer, loader, scaler)


def without_bf16(cfg, trainer):
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.fp16 and not cfg.bf16)
    if cfg.use_bf16:
        other = None
    else:
        other = torch.amp.GradScaler("cuda")
    amp = torch.amp.GradScaler("cuda", enabled=cfg.use_amp)
    trainer.fit(scaler, other, amp)


def from_mode(args, trainer):
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")
    trainer.fit(scaler)
