import torch

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()


@torch.no_grad()
def evaluate(batch):
    # float16 for inference only: no backward, no scaler needed
    with torch.autocast("cuda", dtype=torch.float16):
        return model(batch).argmax(-1)
