import torch
from compat import amp_context

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    with amp_context(enabled=args.use_fp16):  # expect: AMP002
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    with amp_context(dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
