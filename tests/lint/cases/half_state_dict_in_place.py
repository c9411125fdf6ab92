"""``model.half().state_dict()`` in the training loop converts the model itself to float16
before saving it, directly or through a variable, and training goes on in fp16."""

import torch


def train(model, loader, optimizer, epochs, path):
    for epoch in range(epochs):
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        torch.save(model.half().state_dict(), path)  # expect: AMP013


def train_kept(model, loader, optimizer, epochs, path):
    for epoch in range(epochs):
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        state_dict = model.half().state_dict()
        torch.save(state_dict, path)  # expect: AMP013
