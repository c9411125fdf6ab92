"""Both arms of the logging condition update the scaler, one through the helper of another
module (fine); when the logging arm only logs, an iteration that logs unscales without
updating, and the next unscale_ raises (reported)."""

import torch

from pkg import debug_utils


class Trainer:
    def __init__(self, model, opt):
        self.model = model
        self.opt = opt
        self.scaler = torch.amp.GradScaler("cuda")

    def train(self, loader, logger):
        for i, x in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x).mean()
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            do_grads_log = logger.wants(i)
            if do_grads_log:
                debug_utils.step_and_log_diff(self.scaler, self.opt, self.model, "Step")
            else:
                self.scaler.step(self.opt)
                self.scaler.update()
            self.opt.zero_grad()

    def train_log_only(self, loader, logger):
        for i, x in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x).mean()
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.opt)  # expect: AMP010
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            do_grads_log = logger.wants(i)
            if do_grads_log:
                debug_utils.log_grads(self.model, "Step")
            else:
                self.scaler.step(self.opt)
                self.scaler.update()
            self.opt.zero_grad()
