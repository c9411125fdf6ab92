import torch
import utils

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    with utils.autocast_ctx(torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    with utils.autocast_ctx(torch.float16, enabled=False):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
