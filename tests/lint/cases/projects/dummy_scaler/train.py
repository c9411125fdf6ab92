"""A scaler object of a class of another module of the project (re-exported by its
package) whose ``scale(loss)`` returns the loss: stepping the optimizer directly after its
"scaled" backward bypasses nothing (silent); a class of the project that really scales
keeps the finding."""

from utils import HalvingScaler, IdentityScaler
from utils.scaling import IdentityScaler as Plain


def train(model, loader, optimizer):
    scaler = IdentityScaler()
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()
        optimizer.zero_grad()


def train_plain(model, loader, optimizer):
    grad_scaler = Plain()
    for x, y in loader:
        loss = model(x, y)
        grad_scaler.scale(loss).backward()
        optimizer.step()
        optimizer.zero_grad()


def train_scaled(model, loader, optimizer):
    scaler = HalvingScaler()
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()  # expect: AMP004
        optimizer.zero_grad()
