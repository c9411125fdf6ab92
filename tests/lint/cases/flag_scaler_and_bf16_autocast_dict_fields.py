# The scaler and the bf16 autocast are enabled by the same fields of a params dict: when
# both hold, bfloat16 meets an enabled GradScaler.
import torch


class Trainer:
    def __init__(self, params):
        self.params = params
        self.model = build(params)
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=self.params["use_amp"] and self.params["device"] == "cuda"
        )

    def step(self, batch):
        self.optimizer.zero_grad()
        with torch.autocast(
            self.params["device"],
            dtype=torch.bfloat16,
            enabled=self.params["use_amp"] and self.params["device"] == "cuda",
        ):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()  # expect: AMP008
        self.scaler.step(self.optimizer)
        self.scaler.update()


class HalfTrainer:
    """The scaler is enabled only when the dict field picks float16: never bf16 with it."""

    def __init__(self, params):
        self.params = params
        self.model = build(params)
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.params["precision"] == "fp16")

    def step(self, batch):
        self.optimizer.zero_grad()
        dtype = torch.float16 if self.params["precision"] == "fp16" else torch.bfloat16
        with torch.autocast("cuda", dtype=dtype):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
