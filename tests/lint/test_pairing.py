"""Pairings decided by flags and configs, and flow-sensitive bindings: the messages name the
condition, and a pairing that no value of the flags makes is silent."""

from __future__ import annotations

from pathlib import Path

from ampkit.lint import check_paths, check_source

CASES = Path(__file__).parent / "cases"


def _messages(name: str, code: str) -> list[str]:
    path = CASES / name
    return [
        f.message
        for f in check_source(path.read_text(encoding="utf-8"), str(path))
        if f.code == code
    ]


def test_same_flag_message_names_the_flag() -> None:
    (message,) = _messages("flag_scaler_and_bf16_autocast_same_flag.py", "AMP008")
    if "when `use_amp` is true;" not in message:
        raise AssertionError(message)


def test_dtype_chosen_by_config_names_both_flags() -> None:
    (message,) = _messages("flag_amp_dtype_from_config.py", "AMP008")
    if "`use_amp` is true" not in message or "`amp_bf16` is true" not in message:
        raise AssertionError(message)


def test_flag_set_by_dtype_option_names_the_option_value() -> None:
    (message,) = _messages("flag_mixed_precision_set_by_dtype.py", "AMP008")
    if "when `dtype` is 'bfloat16'" not in message:
        raise AssertionError(message)


def test_fp16_option_choice_is_named() -> None:
    (message,) = _messages("config_dtype_choices_fp16.py", "AMP002")
    if "when `amp_dtype` is 'float16'" not in message:
        raise AssertionError(message)


def test_conditional_binding_names_the_condition() -> None:
    (message,) = _messages("scaler_conditional_binding.py", "AMP008")
    if "when `use_scaler` is true" not in message:
        raise AssertionError(message)


def test_unconditional_pairing_names_no_condition() -> None:
    (message,) = _messages("AMP008_bad.py", "AMP008")
    if " when " in message:
        raise AssertionError(message)


_TRAIN = """
import torch
from options import args

optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.amp_dtype)):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
"""

_OPTIONS = """
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--amp-dtype", default="bfloat16", choices={choices})
args = parser.parse_args()
"""


def _tree(tmp_path: Path, choices: str, scaler_file: bool) -> list[str]:
    (tmp_path / "options.py").write_text(_OPTIONS.format(choices=choices), encoding="utf-8")
    (tmp_path / "train.py").write_text(_TRAIN, encoding="utf-8")
    if scaler_file:
        (tmp_path / "fp16_train.py").write_text(
            "import torch\nscaler = torch.amp.GradScaler('cuda')\n", encoding="utf-8"
        )
    return [f.message for f in check_paths([tmp_path]) if f.code == "AMP002"]


def test_option_of_another_file_with_fp16_choice_is_amp002(tmp_path: Path) -> None:
    found = _tree(tmp_path, '["bfloat16", "float16"]', scaler_file=False)
    if len(found) != 1 or "`amp_dtype` is 'float16'" not in found[0]:
        raise AssertionError(found)


def test_option_without_fp16_choice_is_silent(tmp_path: Path) -> None:
    found = _tree(tmp_path, '["bfloat16", "float32"]', scaler_file=False)
    if found:
        raise AssertionError(found)


def test_a_scaler_elsewhere_in_the_tree_keeps_an_unknown_dtype_silent(tmp_path: Path) -> None:
    found = _tree(tmp_path, '["bfloat16", "float16"]', scaler_file=True)
    if found:
        raise AssertionError(found)


def test_option_read_alone_is_not_amp002() -> None:
    # linted alone, the option's choices are not known: the dtype stays unknown, no finding
    text = _TRAIN
    if any(f.code == "AMP002" for f in check_source(text, "train.py")):
        raise AssertionError("an option of unknown choices was taken for float16")


_REBOUND = """
import torch

scaler = torch.amp.GradScaler("cuda"{first})
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

scaler = torch.amp.GradScaler("cuda"{second})
"""


def test_rebinding_is_judged_by_the_binding_that_reaches_the_use() -> None:
    enabled_first = _REBOUND.format(first="", second=", enabled=False")
    found = [f.line for f in check_source(enabled_first, "t.py") if f.code == "AMP008"]
    if found != [8]:
        raise AssertionError(found)
    disabled_first = _REBOUND.format(first=", enabled=False", second="")
    found = [f.line for f in check_source(disabled_first, "t.py") if f.code == "AMP008"]
    if found:
        raise AssertionError(found)


_LITERAL = """
from dataclasses import dataclass
from typing import Literal

import torch


@dataclass
class Config:
    amp_dtype: Literal[{choices}] = "bfloat16"


def train(cfg: Config, model, loader, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=getattr(torch, cfg.amp_dtype)):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
"""


def test_literal_config_field_gives_the_choices() -> None:
    fp16 = check_source(_LITERAL.format(choices='"bfloat16", "float16"'), "t.py")
    found = [f.message for f in fp16 if f.code == "AMP002"]
    if len(found) != 1 or "when `amp_dtype` is 'float16'" not in found[0]:
        raise AssertionError(found)
    bf16 = check_source(_LITERAL.format(choices='"bfloat16", "float32"'), "t.py")
    if any(f.code == "AMP002" for f in bf16):
        raise AssertionError("a Literal without float16 was taken for float16")


def test_dtype_parameter_value_is_named() -> None:
    (message,) = _messages("flag_dtype_parameter_given_bf16.py", "AMP008")
    if "`amp_dtype` is torch.bfloat16" not in message or "`enable_amp` is true" not in message:
        raise AssertionError(message)


def test_torch_calls_do_not_give_a_parameter_its_dtype() -> None:
    text = """
import torch


def fit(model, loader, optimizer, dtype):
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype):
            loss = model(x, y)
        loss.backward()
        optimizer.step()


buffer = torch.zeros(4, dtype=torch.float16)
"""
    if any(f.code == "AMP002" for f in check_source(text, "t.py")):
        raise AssertionError("torch.zeros(dtype=torch.float16) was taken for the autocast dtype")
