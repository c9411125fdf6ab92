from helpers import train_step


def check_one_step(model, batch, optimizer):
    train_step(model, batch, optimizer)


def check_amp_step(model, batch, optimizer):
    train_step(model, batch, optimizer, use_amp=True)
