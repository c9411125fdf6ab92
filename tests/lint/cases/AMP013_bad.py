import torch

model = Net()
model.load_state_dict(torch.load("fp32.pt"))
model.half()
torch.save(model.state_dict(), "model.pt")  # expect: AMP013


def export(net):
    net = net.to(torch.float16)
    state = net.state_dict()
    torch.save({"model": state, "step": 10}, "export.pt")  # expect: AMP013
