import torch

scaler = torch.amp.GradScaler("cuda")

for inputs, labels in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(net(inputs), labels)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)  # expect: AMP016
    optimizer.zero_grad()


def fp32_step(loss):
    loss.backward()
    optimizer.step()
    grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)  # expect: AMP016
    optimizer.zero_grad()
    return grad_norm
