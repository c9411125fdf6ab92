"""An engine loads the model in bf16 in one method (the dtype bound to a name first) and
builds a plain AdamW over it in another: pure bf16 with no fp32 master (AMP017)."""

import torch
from transformers import AutoModelForCausalLM


class Engine:
    def __init__(self, config):
        self.config = config

    def create_model(self):
        dtype = torch.bfloat16
        self.model = AutoModelForCausalLM.from_pretrained(self.config.path, torch_dtype=dtype)

    def create_optimizer(self):
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr)  # expect: AMP017

    def train_batch(self, batch):
        loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
