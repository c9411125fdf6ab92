"""AMP switched by a flag, with the fp32 path in else branches (a very common shape)."""
import torch

scaler = torch.amp.GradScaler("cuda") if args.amp else None


def train_one_epoch(model, optimizer, loader, scaler=None):
    for images, target in loader:
        with torch.autocast("cuda", enabled=scaler is not None):
            output = model(images)
            loss = criterion(output, target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            if args.clip_grad_norm is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if args.clip_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            optimizer.step()


def gan_step(netD, netG, optD, optG, real, noise):
    optD.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        errD = netD(real).mean() - netD(netG(noise).detach()).mean()
    scaler.scale(errD).backward()
    scaler.step(optD)
    optG.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        errG = -netD(netG(noise)).mean()
    scaler.scale(errG).backward()
    scaler.step(optG)
    scaler.update()
