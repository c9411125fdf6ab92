"""``Bf16True(warn_lost_above=...)``: the share of a logged step's weight updates lost above
which the mode warns (once per run); an option added in one file, the mode's own."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ampkit
from ampkit import ConfigurationError, PrecisionWarning


def _fit(mode: ampkit.Bf16True) -> list[warnings.WarningMessage]:
    torch.manual_seed(0)
    x = torch.randn(32, 8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ampkit.Trainer(
            nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 1)),
            lambda p: torch.optim.AdamW(p, lr=1e-6),  # tiny updates: most are rounded away
            loss_fn=nn.functional.mse_loss,
            max_steps=2,
            precision=mode,
            device="cpu",
            batch_size=8,
            logging=ampkit.LoggingConfig(log_every=1, progress_bar=False),
        ).fit(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)))
    return [w for w in seen if issubclass(w.category, PrecisionWarning)]


def test_the_threshold_decides_whether_lost_updates_warn():
    # update_compensation="none" warns at construction; that warning is not the one counted
    with pytest.warns(PrecisionWarning, match="update_compensation='none'"):
        never = ampkit.Bf16True(update_compensation="none", keep_fp32=[], warn_lost_above=1.0)
    assert not [w for w in _fit(never) if "rounded away by the bf16 weights" in str(w.message)]
    with pytest.warns(PrecisionWarning, match="update_compensation='none'"):
        always = ampkit.Bf16True(update_compensation="none", keep_fp32=[], warn_lost_above=0.0)
    lost = [w for w in _fit(always) if "rounded away by the bf16 weights" in str(w.message)]
    assert len(lost) == 1 and "warn_lost_above=0.0" in str(lost[0].message)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.1"])
def test_a_threshold_outside_0_to_1_is_refused(bad):
    with pytest.raises(ConfigurationError, match="warn_lost_above"):
        ampkit.Bf16True(warn_lost_above=bad)


def test_the_default_threshold_is_the_documented_one():
    assert ampkit.Bf16True().warn_lost_above == ampkit.precision.bf16_true.LOST_UPDATES_WARN_AT


def test_the_mode_file_s_defaults_and_choices_are_the_machinery_s():
    """The mode file writes its default share and its option choices itself (reading them
    imports no torch); they are the bf16-true machinery's."""
    from ampkit.precision.bf16_true import COMPENSATIONS, LOST_UPDATES_WARN_AT, STATE_PRECISIONS
    from ampkit.precision.modes import bf16_true

    assert bf16_true.LOST_UPDATES_WARN_AT == LOST_UPDATES_WARN_AT
    choices = {o.name: o.choices for o in ampkit.Bf16True.cli_options}
    assert choices["update_compensation"] == COMPENSATIONS
    assert choices["state_precision"] == STATE_PRECISIONS


def _train(tmp_path, *args: str):
    from click.testing import CliRunner

    from ampkit.cli import main

    tiny = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--log-every", "1"]
    tiny += ["--n-layer", "1", "--n-embd", "32", "--no-progress", "--out", str(tmp_path / "run")]
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as outside pytest (which turns warnings into errors)
        result = CliRunner().invoke(main, ["train", *tiny, "--overwrite", *args])
    # the command line prints each warning as an "ampkit: warning:" line
    lost = [
        line
        for line in result.output.splitlines()
        if line.startswith("ampkit: warning:") and "rounded away by the bf16 weights" in line
    ]
    return result, lost


def test_the_threshold_is_an_ampkit_train_flag(tmp_path):
    """``--warn-lost-above``, declared by the mode alone: the same run warns at 0 and not at
    1 (tiny updates under no compensation: most are rounded away)."""
    lossy = ["--precision", "bf16-true", "--update-compensation", "none", "--lr", "1e-6"]
    quiet, lost = _train(tmp_path, *lossy, "--warn-lost-above", "1")
    assert quiet.exit_code == 0, quiet.output
    assert lost == []
    loud, lost = _train(tmp_path, *lossy, "--warn-lost-above", "0")
    assert loud.exit_code == 0, loud.output
    assert len(lost) == 1 and "warn_lost_above=0.0" in lost[0]


def test_the_threshold_flag_is_checked_like_the_keyword(tmp_path):
    bad, _ = _train(tmp_path, "--precision", "bf16-true", "--warn-lost-above", "1.5")
    assert bad.exit_code == 2
    assert "--warn-lost-above: 1.5 is invalid. Use a share from 0 to 1" in bad.output
    other, _ = _train(tmp_path, "--precision", "bf16", "--warn-lost-above", "0.5")
    assert other.exit_code == 2
    assert "--warn-lost-above applies to --precision bf16-true only" in other.output


def test_the_threshold_flag_is_in_help_and_may_change_on_resume():
    from click.testing import CliRunner

    from ampkit.cli import main
    from ampkit.job.resume import FREE

    shown = CliRunner().invoke(main, ["train", "--help"]).output
    assert "--warn-lost-above SHARE" in shown and "[default: 0.1]" in shown
    assert "warn_lost_above" in FREE
