"""ampkit.integrations.transformers.AmpkitCallback in a real Hugging Face Trainer: a tiny GPT-2
built from a config (random weights, no downloads), bf16 on the CPU, 6 steps."""

from __future__ import annotations

import math
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face tests need transformers: pip install 'ampkit[hf]'"
)

from ampkit.doctor.advice import runs_well  # noqa: E402
from ampkit.errors import PrecisionWarning  # noqa: E402
from ampkit.integrations import (  # noqa: E402
    DOCTOR_PRECISION,
    LOSS_SCALE,
    LOST_UPDATES,
    NONFINITE_MODULE,
    NONFINITE_STEP,
    SKIPPED_STEPS,
)
from ampkit.integrations.transformers import AmpkitCallback  # noqa: E402
from ampkit.precision.hardware import probe  # noqa: E402

pytestmark = pytest.mark.slow  # each Trainer run takes a few seconds on two cores

STEPS = 6
BAD = "transformer.h.1.mlp.c_fc"


class Recorder(transformers.TrainerCallback):
    """A stand-in for a report_to backend: keeps the log lines it is given."""

    def __init__(self) -> None:
        self.lines: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.lines.append(dict(logs or {}))


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=64,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def dataset(n: int = 48) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(n):
        ids = torch.randint(0, 64, (16,), generator=g)
        rows.append({"input_ids": ids, "labels": ids})
    return rows


def train(
    tmp_path,
    model=None,
    *,
    callback: dict | None = None,
    optimizers=(None, None),
    **overrides,
):
    """One Trainer run; returns (trainer, callback or None, recorder)."""
    settings = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=True,
        max_steps=STEPS,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=4,
        disable_tqdm=True,
        seed=0,
    )
    settings.update(overrides)
    args = transformers.TrainingArguments(**settings)
    recorder = Recorder()
    trainer = transformers.Trainer(
        model=model if model is not None else gpt2(),
        args=args,
        train_dataset=dataset(),
        callbacks=[recorder],
        optimizers=optimizers,
    )
    cb = None if callback is None else AmpkitCallback.attach(trainer, **callback)
    trainer.train()
    return trainer, cb, recorder


def train_lines(trainer) -> list[dict]:
    return [row for row in trainer.state.log_history if "loss" in row]


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    """The same run without the callback."""
    trainer, _, _ = train(tmp_path_factory.mktemp("control"))
    return [row["loss"] for row in train_lines(trainer)]


def test_bf16_run_logs_the_keys_and_changes_nothing(tmp_path, control):
    trainer, cb, recorder = train(tmp_path, callback={})
    lines = train_lines(trainer)
    assert len(lines) == STEPS
    assert [row["loss"] for row in lines] == control  # bitwise: the callback only watches
    for row in lines:
        assert row[SKIPPED_STEPS] == 0
        assert LOSS_SCALE not in row  # bf16 scales no loss
        assert LOST_UPDATES not in row  # fp32 weights lose no update
        assert NONFINITE_STEP not in row
    # the backend after the callback got the same keys in its log lines
    sent = [row for row in recorder.lines if "loss" in row]
    assert [row[SKIPPED_STEPS] for row in sent] == [0] * STEPS
    assert cb.autocast_dtype == torch.bfloat16  # read inside the forward
    assert cb.first is None and cb.nonfinite_step is None


def test_injected_nan_weight_names_the_module(tmp_path):
    model = gpt2()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[0, 0] = math.nan
    trainer, cb, recorder = train(tmp_path, model, callback={})
    lines = train_lines(trainer)
    assert cb.nonfinite_step == 1
    assert cb.first.module == BAD and cb.first.phase == "forward"
    assert cb.first.module_type == "Conv1D" and cb.first.dtype == "bfloat16"
    assert cb.first.step == 1
    assert lines[0][NONFINITE_MODULE] == BAD  # in the log history, once
    assert all(NONFINITE_MODULE not in row for row in lines[1:])
    assert [row[NONFINITE_STEP] for row in lines] == [1] * STEPS
    # what the Trainer logs on its own hides it: the nan filter turns the loss into 0.0
    assert lines[0]["loss"] == 0.0 and math.isnan(lines[0]["grad_norm"])


# pure bf16 on purpose: the dtype contract's warning is expected
@pytest.mark.filterwarnings("ignore:AmpkitCallback.*pure bf16:ampkit.errors.PrecisionWarning")
def test_lost_updates_of_bf16_weights(tmp_path):
    """SGD with a learning rate far below half a bf16 ulp: every update is rounded away.

    (Zero weights, the biases, would store any update: they are set to 0.5 first.)"""
    model = gpt2().to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p[p == 0] = 0.5
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-12)
    trainer, cb, _ = train(
        tmp_path, model, callback={}, optimizers=(optimizer, None), max_steps=3, max_grad_norm=0
    )
    lines = train_lines(trainer)
    assert [row[LOST_UPDATES] for row in lines] == [1.0, 1.0, 1.0]
    assert cb.lost_updates == 1.0


# pure bf16 on purpose: the dtype contract's warning is expected
@pytest.mark.filterwarnings("ignore:AmpkitCallback.*pure bf16:ampkit.errors.PrecisionWarning")
def test_lost_updates_of_bf16_weights_none_lost(tmp_path):
    """A large step moves every weight with a gradient: nothing is lost."""
    model = gpt2().to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e3)
    trainer, _, _ = train(
        tmp_path, model, callback={}, optimizers=(optimizer, None), max_steps=1, max_grad_norm=0
    )
    (line,) = train_lines(trainer)
    assert 0.0 <= line[LOST_UPDATES] < 0.01


def test_doctor_on_start_logs_its_recommendation_and_changes_nothing(tmp_path, control):
    trainer, cb, _ = train(tmp_path, callback={"doctor_on_start": True}, max_steps=2)
    lines = train_lines(trainer)
    assert cb.report is not None
    # the advice is what this machine runs well: bf16 on a CPU with native bf16, else fp32
    expected = runs_well(probe(torch.device("cpu")))[0]
    assert lines[0][DOCTOR_PRECISION] == cb.report.recommendation.precision == expected
    assert all(DOCTOR_PRECISION not in row for row in lines[1:])
    assert [row["loss"] for row in lines] == control[:2]  # weights, gradients, RNG restored


def test_gradient_accumulation_names_the_module_of_the_micro_batch(tmp_path):
    model = gpt2()
    with torch.no_grad():
        model.transformer.h[0].attn.c_proj.weight[1, 2] = math.inf
    trainer, cb, _ = train(
        tmp_path,
        model,
        callback={},
        max_steps=2,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=2,
    )
    lines = train_lines(trainer)
    assert len(lines) == 2 and cb.nonfinite_step == 1
    assert cb.first.module == "transformer.h.0.attn.c_proj"


def test_fp16_on_a_cpu_falls_back_and_the_callback_says_so(tmp_path):
    with pytest.warns(PrecisionWarning, match="asked for fp16=True, but .* fp32 autocast"):
        trainer, cb, _ = train(tmp_path, callback={}, bf16=False, fp16=True, max_steps=1)
    assert cb.autocast_dtype is None
    assert LOSS_SCALE not in train_lines(trainer)[0]  # Accelerate made no scaler


def test_fp16_fallback_on_a_cpu_is_said_on_the_console_at_the_first_step(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="ampkit"), warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionWarning)  # the console line is what counts
        train(tmp_path, callback={}, bf16=False, fp16=True, max_steps=2)
    said = [r.getMessage() for r in caplog.records if r.name == "ampkit"]
    assert len(said) == 1 and said[0].startswith("step 1: AmpkitCallback: the Trainer was asked")
    assert "fp16=True" in said[0] and "\n" not in said[0]


class Overflow(transformers.TrainerCallback):
    """Turns one gradient inf on the chosen optimizer steps (1-based), before unscaling."""

    def __init__(self, param: torch.Tensor, steps: set[int]) -> None:
        self.steps, self.step = steps, 0
        param.register_hook(lambda g: g * math.inf if self.step in self.steps else g)

    def on_step_begin(self, args, state, control, **kwargs):
        self.step = state.global_step + 1


@pytest.mark.gpu
def test_fp16_on_cuda_counts_skipped_steps_and_reads_the_scale(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = gpt2()
    injected = {2, 3, 5}
    overflow = Overflow(model.transformer.h[0].mlp.c_fc.weight, injected)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        fp16=True,
        max_steps=STEPS,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=4,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=dataset(), callbacks=[overflow]
    )
    cb = AmpkitCallback.attach(trainer)
    trainer.train()
    lines = train_lines(trainer)
    assert cb.autocast_dtype == torch.float16
    assert [row[SKIPPED_STEPS] for row in lines] == [0, 1, 2, 2, 3, 3]
    assert cb.skipped_steps == len(injected)
    # GradScaler starts at 2**16 and halves on each skipped step (no growth in 6 steps)
    assert [row[LOSS_SCALE] for row in lines] == [
        2.0**16,
        2.0**15,
        2.0**14,
        2.0**14,
        2.0**13,
        2.0**13,
    ]


def test_a_report_to_backend_gets_the_keys(tmp_path, monkeypatch):
    """report_to="mlflow": the Trainer's own MLflowCallback sends the keys (read back with
    MLflow's client); added with callbacks=[...] instead of attach, it would send none."""
    mlflow = pytest.importorskip("mlflow", reason="pip install 'ampkit[mlflow]'")
    for name, attach in (("attached", True), ("appended", False)):
        store = (tmp_path / name / "mlruns").resolve()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "hf")
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / name / "out"),
            use_cpu=True,
            bf16=True,
            max_steps=2,
            logging_steps=1,
            report_to="mlflow",
            save_strategy="no",
            per_device_train_batch_size=4,
            disable_tqdm=True,
        )
        callbacks = [] if attach else [AmpkitCallback()]
        trainer = transformers.Trainer(
            model=gpt2(), args=args, train_dataset=dataset(), callbacks=callbacks
        )
        if attach:
            AmpkitCallback.attach(trainer)
        trainer.train()
        assert all(SKIPPED_STEPS in row for row in train_lines(trainer))  # the history has it
        client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
        (run,) = client.search_runs([client.get_experiment_by_name("hf").experiment_id])
        history = client.get_metric_history(run.info.run_id, SKIPPED_STEPS)
        assert [(m.step, m.value) for m in history] == ([(1, 0.0), (2, 0.0)] if attach else [])
