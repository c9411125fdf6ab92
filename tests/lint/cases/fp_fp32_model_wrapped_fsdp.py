"""The same wrapping of an fp32 model (FSDP's ``MixedPrecision`` computes in bf16 and keeps
the fp32 weights the optimizer steps), and a config dtype cast back to fp32 before the
optimizer: nothing to report."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from transformers import AutoModelForCausalLM


class Eagle3Model(torch.nn.Module):
    def __init__(self, draft_model):
        super().__init__()
        self.draft_model = draft_model


def main(draft_model, lr):
    draft_model = draft_model.cuda()
    model = Eagle3Model(draft_model=draft_model)
    model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
    return torch.optim.AdamW(model.parameters(), lr=lr)


class Policy:
    def __init__(self, cfg):
        if cfg["precision"] == "float32":
            dtype = torch.float32
        else:
            dtype = torch.bfloat16
        self.model = AutoModelForCausalLM.from_pretrained(cfg["model_name"], torch_dtype=dtype)
        self.model.float()
        self.model = FSDP(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)


class TunedLens(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.translators = torch.nn.Linear(model.config.hidden_size, model.config.hidden_size)


def tune(name):
    """A frozen bf16 model handed first to a module that trains its own fp32 parameters."""
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16)
    lens = TunedLens(model)
    return torch.optim.AdamW(lens.parameters(), amsgrad=True)
