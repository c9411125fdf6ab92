"""The Trainer's default console output: a line per logged step and a summary at the end."""

from __future__ import annotations

import torch

from ampkit import LoggingConfig, Trainer


def fit(capsys, **logging):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    data = [(torch.randn(4), torch.randn(1)) for _ in range(8)]
    trainer = Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=0.1),
        loss_fn=torch.nn.functional.mse_loss,
        max_steps=4,
        batch_size=2,
        precision="fp32",
        logging=LoggingConfig(log_every=2, progress_bar=False, **logging),
    )
    result = trainer.fit(data)
    return result, capsys.readouterr().err


def test_a_line_every_log_every_steps_and_a_summary_by_default(capsys):
    result, err = fit(capsys)
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == ["2/4", "4/4"]
    assert f"loss {result.final_loss:.4f}" in lines[-1]
    assert "precision  fp32 on cpu" in err
    assert "steps  4 (0 skipped)" in err and f"final loss  {result.final_loss:.4f}" in err


def test_console_false_writes_nothing(capsys):
    _, err = fit(capsys, console=False)
    assert err == ""
