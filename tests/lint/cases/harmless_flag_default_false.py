"""A test helper that runs forward and backward under autocast(enabled=use_amp), where
use_amp defaults to False and no call in the file passes it: fp16 is never on here. The
fp32 optimizer step elsewhere in the file does not make it fp16 training."""
import torch


def forward_backward(model, batch, use_amp=False):
    with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
        loss = model(batch).sum()
    loss.backward()
    return loss


def test_gradients_flow(model, batch):
    forward_backward(model, batch)
    assert all(p.grad is not None for p in model.parameters())


def test_one_sgd_step(model, batch):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(batch).sum().backward()
    optimizer.step()


def fit(model, loader, optimizer, amp=False):
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):  # expect: AMP002
            loss = model(batch).sum()
        loss.backward()
        optimizer.step()


fit(model, loader, optimizer, amp=args.amp)
