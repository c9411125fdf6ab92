"""The fix: the weights are loaded in fp32 and bf16 runs under autocast; a second engine
casts its model back to fp32 in another method before training (which method runs first is
not known, so it is not judged)."""

import torch
from transformers import AutoModelForCausalLM


class Engine:
    def __init__(self, config):
        self.config = config

    def create_model(self):
        dtype = torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(self.config.path, torch_dtype=dtype)

    def create_optimizer(self):
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr)

    def train_batch(self, batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


class CastBack:
    def load(self, path):
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16)

    def prepare(self):
        self.model.float()

    def create_optimizer(self):
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)
