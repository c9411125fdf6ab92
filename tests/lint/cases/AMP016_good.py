import torch

scaler = torch.amp.GradScaler("cuda")

for inputs, labels in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(net(inputs), labels)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()

# two networks, two optimizers: the generator is clipped after the critic's step,
# but before its own step and after its own backward
for real in loader:
    scaler.scale(critic_loss(real)).backward()
    scaler.step(critic_opt)
    scaler.update()
    scaler.scale(generator_loss(real)).backward()
    scaler.unscale_(generator_opt)
    torch.nn.utils.clip_grad_norm_(generator.parameters(), 1.0)
    scaler.step(generator_opt)
    scaler.update()
