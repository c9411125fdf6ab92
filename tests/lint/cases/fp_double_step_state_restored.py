"""Stepping an optimizer again after restoring its state (a test that checks the restored
optimizer still steps) is no double step: nothing to report."""

import torch


def test_restored_optimizer_steps(model, optimizer, x):
    """Stepping again after restoring the optimizer's state is no double step."""
    model(x).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    optimizer.load_state_dict(state)
    optimizer.step()
