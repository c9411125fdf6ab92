"""Resuming ampkit train: which changed settings are refused, which one is applied."""

from __future__ import annotations

import pytest
import torch

from ampkit import ConfigurationError, TrainConfig
from ampkit.job.resume import carry_over, check_resume_config, override_lr, run_record

SAVED = run_record(TrainConfig(seed=1, batch_size=4, out="runs/a", steps=10), "abc")


def check(config: TrainConfig, sha: str = "abc", precision: str = "fp32") -> list[str]:
    return check_resume_config(
        SAVED,
        config,
        data_sha256=sha,
        precision=precision,
        saved_precision="fp32",
        checkpoint="runs/a/checkpoints/step-00000004",
    )


def test_free_settings_may_change():
    assert check(TrainConfig(seed=1, batch_size=4, out="elsewhere", steps=50, log_every=1)) == []


def test_changed_settings_are_refused_all_at_once_as_flags():
    config = TrainConfig(seed=2, batch_size=8, max_grad_norm=None, data="new.txt", out="runs/a")
    with pytest.raises(ConfigurationError) as caught:
        check(config, sha="def", precision="bf16")
    message = str(caught.value)
    for part in (
        "--precision fp32 (now bf16)",
        "--seed 1 (now 2)",
        "--batch-size 4 (now 8)",
        "--max-grad-norm 1.0 (now 0)",
        "--data (the built-in corpus) (now new.txt, whose contents differ)",
    ):
        assert part in message
    assert "checkpoint_dir" not in message and "resume=" not in message


def test_a_changed_state_precision_is_refused_also_against_an_older_record():
    with pytest.raises(ConfigurationError, match=r"--state-precision \(none\) \(now bf16-kahan\)"):
        check(
            TrainConfig(
                seed=1, batch_size=4, out="runs/a", mode_options={"state_precision": "bf16-kahan"}
            )
        )
    older = {k: v for k, v in SAVED.items() if k != "state_precision"}  # before the option
    with pytest.raises(ConfigurationError, match="--state-precision"):
        check_resume_config(
            older,
            TrainConfig(
                seed=1,
                batch_size=4,
                out="runs/a",
                mode_options={"state_precision": "bf16-stochastic"},
            ),
            data_sha256="abc",
            precision="bf16-true",
            saved_precision="bf16-true",
            checkpoint="runs/a/checkpoints/step-00000004",
        )
    assert check(TrainConfig(seed=1, batch_size=4, out="runs/a")) == []


def test_a_moved_but_identical_data_file_is_fine():
    assert check(TrainConfig(seed=1, batch_size=4, data="moved.txt")) == []


def test_changed_lr_is_applied_and_said():
    notes = check(TrainConfig(seed=1, batch_size=4, lr=1e-3))
    assert any("--lr 0.001 replaces the 0.002" in note for note in notes)


def test_override_lr_keeps_the_schedule_position():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: (step + 1) / 10)
    for _ in range(3):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(2e-3 * 0.4)
    override_lr(opt, sched, 1e-3)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.4)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.5)


def test_an_old_checkpoint_without_a_record_is_noted():
    notes = check_resume_config(
        None,
        TrainConfig(),
        data_sha256="abc",
        precision="fp32",
        saved_precision="fp32",
        checkpoint="c",
    )
    assert "records no settings" in notes[0]


def test_carry_over_takes_the_settings_not_given_from_the_record():
    saved = run_record(
        TrainConfig(out="runs/a", steps=10, log_every=2, checkpoint_every=5, keep_last=2), "abc"
    )
    config = TrainConfig(out="runs/a", resume="auto", steps=20)
    carried, notes = carry_over(saved, config, given={"out", "resume", "steps"})
    assert (carried.steps, carried.log_every, carried.checkpoint_every, carried.keep_last) == (
        20,
        2,
        5,
        2,
    )
    assert notes == [
        "carried over from the checkpoint: --log-every 2, --checkpoint-every 5, --keep-last 2 "
        "(give a flag again to change it)"
    ]
    assert carry_over(saved, config, given=None) == (config, [])  # the library: as given
    assert carry_over(None, config, given=set()) == (config, [])  # an older checkpoint


def test_carry_over_of_a_damaged_record_is_refused():
    saved = {**run_record(TrainConfig(out="runs/a"), "abc"), "keep_last": "two"}
    with pytest.raises(ConfigurationError, match="--keep-last must be an integer >= 1"):
        carry_over(saved, TrainConfig(out="runs/a", resume="auto"), given=set())


@pytest.mark.parametrize(
    ("name", "default"), [("state_precision", "fp32"), ("update_compensation", "kahan")]
)
def test_a_bf16_true_default_left_unset_and_spelled_out_are_the_same_run(name, default):
    spelled = TrainConfig(
        seed=1, batch_size=4, out="runs/a", precision="bf16-true", mode_options={name: default}
    )
    unset = TrainConfig(seed=1, batch_size=4, out="runs/a", precision="bf16-true")
    for saved, now in ((unset, spelled), (spelled, unset)):
        record = run_record(saved, "abc")
        assert (
            check_resume_config(
                record,
                now,
                data_sha256="abc",
                precision="bf16-true",
                saved_precision="bf16-true",
                checkpoint="runs/a/checkpoints/step-00000004",
            )
            == []
        )
