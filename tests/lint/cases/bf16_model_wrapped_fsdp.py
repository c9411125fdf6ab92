"""A draft model cast to bf16, built into a larger module and sharded by FSDP with a bf16
``MixedPrecision``: FSDP shards the parameters in the dtype they have, so AdamW steps bf16
weights. A dtype a config picks between fp32 and bf16 trains in bf16 when it says so."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from transformers import AutoModelForCausalLM


class Eagle3Model(torch.nn.Module):
    def __init__(self, draft_model):
        super().__init__()
        self.draft_model = draft_model


def main(draft_model, lr):
    draft_model = draft_model.cuda().to(torch.bfloat16)
    model = Eagle3Model(draft_model=draft_model)
    model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
    return torch.optim.AdamW(model.parameters(), lr=lr)  # expect: AMP017


class Policy:
    def __init__(self, cfg):
        if cfg["precision"] == "float32":
            dtype = torch.float32
        elif cfg["precision"] == "bfloat16":
            dtype = torch.bfloat16
        else:
            raise ValueError(cfg["precision"])
        self.model = AutoModelForCausalLM.from_pretrained(cfg["model_name"], torch_dtype=dtype)
        self.model = FSDP(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)  # expect: AMP017
