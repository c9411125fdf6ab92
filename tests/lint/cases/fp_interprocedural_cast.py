# A hyper-parameter search calls train() from a module-level loop. The casts in train()
# run outside every autocast region (rounding the anchors once, saving a half copy), so
# the search loop must not make them "a manual cast in an autocast loop".
import copy

import torch


def train(settings):
    net = build(settings)
    net.half().float()  # round the anchor constants to fp16 precision, once
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(settings.epochs):
        for images, targets in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = criterion(net(images), targets)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        snapshot = {"net": copy.deepcopy(net).half(), "epoch": epoch}
        torch.save(snapshot, "last.pt")
        evaluate(net=load_for_eval("last.pt").half())


for trial in range(300):
    train(mutate(base_settings))
