"""A launcher builds the GradScaler when either half-precision flag is set and hands it to a
trainer defined elsewhere: with `use_bf16` the scaler scales a bfloat16 run (AMP008, at the
construction: the autocast is out of view)."""

import torch


def main(trainer, model, optimizer, loader):
    use_scaler = trainer.use_fp16 or trainer.use_bf16
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None  # expect: AMP008
    trainer.train(model, optimizer, loader, scaler)


def from_mode(args, trainer):
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision in ("fp16", "bf16"))  # expect: AMP008
    trainer.fit(scaler)
