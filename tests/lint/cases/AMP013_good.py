import torch

model = Net()
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
torch.save(model.state_dict(), "model.pt")
model.half()
model.eval()


def train_and_save(net, batches):
    for batch in batches:
        net(batch).sum().backward()
        opt.step()
    net = net.half()
    net = net.float()
    torch.save(net.state_dict(), "checkpoint.pt")


def export_fp16(net):
    # an fp16 export for inference: nothing is trained in this function
    net = net.half()
    torch.save(net.state_dict(), "fp16-export.pt")
