"""The same weighted losses divided by the accumulation (by a product with its reciprocal,
or by a scale computed from it): nothing to report."""

import torch


def train(model, criterion, loader, optimizer, scaler, grad_accum_steps, last_batch_idx):
    for i, (samples, targets) in enumerate(loader):
        with torch.autocast("cuda"):
            loss_dict = criterion(model(samples), targets)
            weight_dict = criterion.weight_dict
            losses = sum(
                (1 / grad_accum_steps) * loss_dict[k] * weight_dict[k]
                for k in loss_dict
                if k in weight_dict
            )
        scaler.scale(losses).backward()
        optimizer_update = (i == last_batch_idx) or ((i + 1) % grad_accum_steps == 0)
        if optimizer_update is True:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def distill(student, teacher, criterion, loader, optimizer, scaler, grad_accum_steps, args):
    scale = 1.0 / grad_accum_steps
    for i, (inputs, targets) in enumerate(loader):
        optimizer_update = (i + 1) % grad_accum_steps == 0
        with torch.autocast("cuda"):
            outputs = student(inputs)
            dist_loss = criterion(outputs, teacher(inputs))
            loss = (1 - args.lambda_param) * criterion(outputs, targets) + (
                args.lambda_param * dist_loss
            )
        scaler.scale(loss * scale).backward()
        if optimizer_update is True:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
