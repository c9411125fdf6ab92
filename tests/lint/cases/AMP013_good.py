import torch

model = Net()
torch.save(model.state_dict(), "model.pt")
model.half()
model.eval()


def export(net):
    net = net.half()
    net = net.float()
    torch.save(net.state_dict(), "export.pt")
