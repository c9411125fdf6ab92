import torch

model = Net().cuda()
for x, y in loader:
    x = x.half()  # expect: AMP007
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x.to(torch.bfloat16))  # expect: AMP007
        loss = loss_fn(out, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
