import settings
import torch
from settings import AMP_DTYPE

optimizer = torch.optim.SGD(model.parameters(), lr=settings.Config.lr)
for x, y in loader:
    with torch.autocast("cuda", dtype=AMP_DTYPE):  # expect: AMP002
        loss = model(x, y)
    loss.backward()
    optimizer.step()

for x, y in loader:
    with torch.autocast("cuda", dtype=settings.Config.dtype):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
