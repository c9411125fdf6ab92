"""A float16 copy of the weights for the checkpoint leaves the model in fp32, and a model
converted for export after training is not trained again: nothing to report."""

import torch


def train(model, loader, optimizer, epochs, path):
    for epoch in range(epochs):
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        torch.save({k: v.half() for k, v in model.state_dict().items()}, path)


def export(model, path):
    torch.save(model.half().state_dict(), path)
