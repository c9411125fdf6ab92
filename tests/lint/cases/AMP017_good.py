import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("org/model", dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)


def finetune(name, loader):
    net = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    net.float()  # fp32 weights: the master copy; bf16 comes from autocast
    opt = torch.optim.AdamW(net.parameters(), lr=1e-5)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = net(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()


def inference(name):
    frozen = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16)
    head = torch.nn.Linear(16, 2)
    return frozen, torch.optim.AdamW(head.parameters())  # trains the fp32 head only
