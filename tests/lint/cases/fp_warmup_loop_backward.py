# A warm-up (or out-of-memory probe) loop runs backward and zeroes the gradients; the
# training loop after it steps through the scaler. The two loops never share a step.
import torch

scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

for length in range(min_len, max_len, stride):
    batch = dummy_batch(length)
    with torch.autocast("cuda", enabled=use_amp):
        loss = net(batch)
    loss.backward()
    net.zero_grad()

for epoch in range(epochs):
    for batch in loader:
        with torch.autocast("cuda", enabled=use_amp):
            loss = net(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def probe_memory(net, optimizer, batches):
    for batch in batches:
        net(batch).backward()
        optimizer.zero_grad()


def fit(net, optimizer, batches):
    probe_memory(net, optimizer, batches)
    for batch in batches:
        scaler.scale(net(batch)).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


# the same backward in the training step itself is still a bug
for batch in loader:
    loss = net(batch)
    loss.backward()  # expect: AMP003
    scaler.step(optimizer)
    scaler.update()
