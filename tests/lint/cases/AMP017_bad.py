import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("org/model", dtype="auto")
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)  # expect: AMP017


def finetune(name, loader):
    net = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16).to("cuda")
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)  # expect: AMP017
    for batch in loader:
        net(**batch).loss.backward()
        opt.step()
        opt.zero_grad()


def from_scratch(build):
    encoder = build()
    encoder.to(device="cuda", dtype=torch.bfloat16)
    return torch.optim.Adam(  # expect: AMP017
        [{"params": [p for n, p in encoder.named_parameters() if "bias" not in n]}], lr=1e-4
    )
