import torch
from utils import autocast_ctx

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    with autocast_ctx(torch.float16):  # expect: AMP002
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
