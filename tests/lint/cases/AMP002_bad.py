import torch

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type="cuda", dtype=torch.float16):  # expect: AMP002
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()


def step(batch):
    with torch.cuda.amp.autocast():  # expect: AMP002, AMP006
        loss = model(batch).mean()
    loss.backward()
    optimizer.step()
