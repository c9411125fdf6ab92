"""Timed like a benchmark, but the trained weights are kept: fp16 training without a scaler,
and a training loop written in a function is not a module-level benchmark either."""
import time

import torch

from model import GPT

ctx = torch.autocast("cuda", dtype=torch.float16)
model = GPT().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
t0 = time.time()
for batch in range(100):
    with ctx:  # expect: AMP002
        loss = model(batch)
    loss.backward()
    optimizer.step()
print(time.time() - t0)
torch.save(model.state_dict(), "model.pt")
