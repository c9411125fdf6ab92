"""Shapes from the PyTorch "Automatic Mixed Precision examples" page, written from scratch."""
import torch
from torch import nn, optim

model = nn.Linear(16, 16).cuda()
optimizer = optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.MSELoss()
scaler = torch.amp.GradScaler("cuda")
max_norm = 1.0
iters_to_accumulate = 4

# typical mixed precision training
for epoch in range(3):
    for input, target in data:
        optimizer.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(input)
            loss = loss_fn(output, target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

# gradient clipping on unscaled gradients
for epoch in range(3):
    for input, target in data:
        optimizer.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(input)
            loss = loss_fn(output, target)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()

# gradient accumulation
for epoch in range(3):
    for i, (input, target) in enumerate(data):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(input)
            loss = loss_fn(output, target)
            loss = loss / iters_to_accumulate
        scaler.scale(loss).backward()
        if (i + 1) % iters_to_accumulate == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

# gradient penalty
for epoch in range(3):
    for input, target in data:
        optimizer.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(input)
            loss = loss_fn(output, target)
        scaled_grad_params = torch.autograd.grad(
            outputs=scaler.scale(loss), inputs=model.parameters(), create_graph=True
        )
        inv_scale = 1.0 / scaler.get_scale()
        grad_params = [p * inv_scale for p in scaled_grad_params]
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            grad_norm = 0
            for grad in grad_params:
                grad_norm += grad.pow(2).sum()
            grad_norm = grad_norm.sqrt()
            loss = loss + grad_norm
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

# multiple models, losses and optimizers
model0, model1 = nn.Linear(4, 4).cuda(), nn.Linear(4, 4).cuda()
optimizer0 = optim.SGD(model0.parameters(), lr=0.1)
optimizer1 = optim.SGD(model1.parameters(), lr=0.1)
for epoch in range(3):
    for input, target in data:
        optimizer0.zero_grad()
        optimizer1.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output0 = model0(input)
            output1 = model1(input)
            loss0 = loss_fn(2 * output0 + 3 * output1, target)
            loss1 = loss_fn(3 * output0 - 5 * output1, target)
        scaler.scale(loss0).backward(retain_graph=True)
        scaler.scale(loss1).backward()
        scaler.unscale_(optimizer0)
        scaler.step(optimizer0)
        scaler.step(optimizer1)
        scaler.update()
