"""Real code shapes: name resolution, aliases, self attributes, helpers, frameworks."""

from __future__ import annotations

import textwrap

import pytest

from ampkit.lint import check_source

STEP = """
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""


def codes(text: str) -> list[str]:
    return [f.code for f in check_source(textwrap.dedent(text)) if f.severity.fails]


@pytest.mark.parametrize(
    "header",
    [
        "import torch\nscaler = torch.amp.GradScaler('cuda')\n",
        "import torch\nscaler = torch.GradScaler()\n",
        "from torch.amp import GradScaler as S\nscaler = S('cuda')\n",
        "import torch.amp as A\nscaler = A.GradScaler('cuda')\n",
        "import torch\nscaler = torch.amp.GradScaler('cuda') if use_amp else None\n",
    ],
)
def test_scaler_constructions_are_recognised(header: str) -> None:
    assert codes("import torch\n" + header + STEP) == ["AMP001"]


def test_scaler_under_any_name_via_constructor() -> None:
    text = "import torch\ngs = torch.amp.GradScaler('cuda')\n" + STEP.replace("scaler", "gs")
    assert codes(text) == ["AMP001"]


def test_clip_through_module_alias() -> None:
    text = "import torch\nimport torch.nn as nn\nscaler = torch.amp.GradScaler()\n" + STEP.replace(
        "torch.nn.utils", "nn.utils"
    )
    assert codes(text) == ["AMP001"]


def test_backward_in_helper_function_is_followed() -> None:
    text = """
    import torch
    scaler = torch.amp.GradScaler("cuda")

    def backward(loss):
        scaler.scale(loss).backward()

    for x in data:
        backward(model(x))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
    assert codes(text) == ["AMP001"]


def test_trainer_class_with_driver_method() -> None:
    text = """
    import torch

    class Trainer:
        def __init__(self):
            self.amp_scaler = torch.amp.GradScaler("cuda")

        def backward(self, loss):
            self.amp_scaler.scale(loss).backward()

        def step(self):
            self.opt.zero_grad()
            self.amp_scaler.step(self.opt)
            self.amp_scaler.update()

        def fit(self, loader):
            for batch in loader:
                self.backward(self.model(batch))
                self.step()
    """
    assert codes(text) == ["AMP014"]


def test_step_without_update_anywhere_in_method() -> None:
    text = """
    import torch

    class Trainer:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")

        def train(self, loader):
            for batch in loader:
                self.scaler.scale(self.model(batch)).backward()
                self.scaler.step(self.optimizer)
    """
    assert codes(text) == ["AMP005"]


@pytest.mark.parametrize(
    "body",
    [
        # Lightning manual optimisation
        "self.manual_backward(loss)\nopt.step()\n",
        # DeepSpeed engine
        "model_engine.backward(loss)\nmodel_engine.step()\n",
        # schedulers and progress bars are not optimizers or scalers
        "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()\nscheduler.step()\nlr_scheduler.step()\npbar.update(1)\n",
        # Accelerate's clip unscales by itself
        "accelerator.backward(loss)\naccelerator.clip_grad_norm_(model.parameters(), 1.0)\noptimizer.step()\n",
        # timm-style loss scaler object handles backward, unscale and clip
        "loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())\n",
        # fp32 training with clipping
        "loss.backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\noptimizer.step()\n",
    ],
)
def test_framework_shapes_are_clean(body: str) -> None:
    text = (
        "import torch\nscaler = torch.amp.GradScaler('cuda')\nfor x in data:\n"
        + textwrap.indent(body, "    ")
    )
    assert codes(text) == []


def test_elif_chain_arms_exclude_each_other() -> None:
    text = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in data:
        loss = model(x)
        if precision == "fp16":
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        elif precision == "bf16":
            loss.backward()
            optimizer.step()
        else:
            loss.backward()
            optimizer.step()
    """
    assert codes(text) == []


def test_unscale_in_conditional_before_clip_is_enough() -> None:
    text = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in data:
        scaler.scale(model(x)).backward()
        if clip:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
    """
    assert codes(text) == []


def test_autocast_context_stored_in_variable() -> None:
    text = """
    import torch
    amp_ctx = torch.autocast("cuda", dtype=torch.float16)
    for x in data:
        with amp_ctx:
            loss = model(x)
        loss.backward()
        optimizer.step()
    """
    assert codes(text) == ["AMP002"]


def test_default_dtypes() -> None:
    step = "loss.backward()\noptimizer.step()\n"
    fp16_cuda = "import torch\nwith torch.autocast('cuda'):\n    loss = m(x)\n" + step
    bf16_cpu = "import torch\nwith torch.autocast('cpu'):\n    loss = m(x)\n" + step
    disabled = "import torch\nwith torch.autocast('cuda', enabled=False):\n    loss = m(x)\n" + step
    assert codes(fp16_cuda) == ["AMP002"]
    assert codes(bf16_cpu) == []
    assert codes(disabled) == []


def test_findings_are_not_duplicated_when_inlined() -> None:
    text = """
    import torch
    scaler = torch.amp.GradScaler("cuda")

    def step(loss):
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(optimizer)
        scaler.update()

    for x in data:
        step(model(x))
    """
    assert codes(text) == ["AMP001"]


def test_recursive_helpers_terminate() -> None:
    text = """
    def a():
        b()
        loss.backward()
    def b():
        a()
    a()
    """
    assert codes(text) == []


def test_scaler_parameter_recognised_by_annotation() -> None:
    text = """
    import torch
    from torch.amp import GradScaler

    def step(gs: GradScaler, model, optimizer, loss):
        gs.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        gs.step(optimizer)
        gs.update()
    """
    assert codes(text) == ["AMP001"]


def test_custom_loss_scaler_object_means_no_amp002() -> None:
    text = """
    import torch
    loss_scaler = NativeScaler()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    if loss_scaler is not None:
        loss_scaler(loss, optimizer)
    else:
        loss.backward()
        optimizer.step()
    """
    assert codes(text) == []


def test_default_path_is_current_folder(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from ampkit.cli import main

    (tmp_path / "t.py").write_text(
        "import torch\ns = torch.cuda.amp.GradScaler()\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["lint"])
    assert result.exit_code == 1 and "t.py:2:5: AMP006" in result.output


def test_methods_inherited_from_a_base_class_in_the_file_are_followed() -> None:
    text = """
    import torch

    class BaseTrainer:
        def optimizer_step(self):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()

    class Trainer(BaseTrainer):
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")

        def fit(self, loader):
            for batch in loader:
                self.scaler.scale(self.model(batch)).backward()
                self.optimizer_step()
    """
    assert codes(text) == ["AMP001"]


def test_self_inheriting_class_names_terminate() -> None:
    text = "class A(A):\n    def f(self):\n        self.f()\nclass B(C):\n    pass\nclass C(B):\n    pass\n"
    assert codes(text) == []


def test_ampkit_loss_scaler_is_a_scaler() -> None:
    text = """
    import torch
    from ampkit import LossScaler

    ls = LossScaler()
    for x in data:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        ls.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        ls.step(optimizer)
        ls.update()
    """
    assert codes(text) == ["AMP001"]
