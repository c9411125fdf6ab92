import torch

model = Net().cuda()
for x, y in loader:
    x = x.to("cuda", non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
        loss = loss_fn(out.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

# inference in plain half precision, no autocast involved
infer_model = Net().cuda().half()
for x in test_loader:
    preds = infer_model(x.half())
