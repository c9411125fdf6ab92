import torch

model = Net()
model.load_state_dict(torch.load("fp32.pt"))
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
model.half()
torch.save(model.state_dict(), "model.pt")  # expect: AMP013


def train_and_save(net, batches):
    for batch in batches:
        net(batch).sum().backward()
        opt.step()
    net = net.to(torch.float16)
    state = net.state_dict()
    torch.save({"model": state, "step": 10}, "checkpoint.pt")  # expect: AMP013
