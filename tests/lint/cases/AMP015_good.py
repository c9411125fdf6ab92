import torch

scaler = torch.amp.GradScaler("cuda", enabled=args.amp)

for inputs, labels in loader:
    with torch.autocast("cuda", enabled=args.amp):
        loss = criterion(net(inputs), labels)
    if args.amp:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad()

for inputs, labels in loader:
    scaler.scale(criterion(net(inputs), labels)).backward()
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    if scaler is None:
        optimizer.step()

# two updates per batch, each with its own backward pass (e.g. a second objective)
for inputs, labels in loader:
    scaler.scale(criterion(net(inputs), labels)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    scaler.scale(regulariser(net)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
