"""docs/trainer.md, "Porting a Hugging Face fine-tuning loop": its three blocks run as written,
the Trainer's run keeps to the hand-written loop's step count, schedule and accuracy, and in
fp32 it is bitwise the hand-written loop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # three fine-tuning runs of a small BERT

DOC = Path(__file__).resolve().parents[2] / "docs" / "trainer.md"


def blocks() -> tuple[str, str, str]:
    text = DOC.read_text()
    section = text[text.index("## Porting a Hugging Face fine-tuning loop") :]
    section = section[: section.index("\n## ", 1)]
    setup, before, after = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return setup, before, after


def run(*code: str) -> dict:
    namespace: dict = {}
    for block in code:
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


def test_the_ported_loop_runs_as_written_and_keeps_the_hand_loops_numbers():
    pytest.importorskip("transformers", reason="transformers is not installed")
    setup, before, after = blocks()
    ported = run(setup, after)
    trainer, result, model = ported["trainer"], ported["result"], ported["model"]
    steps = ported["epochs"] * len(ported["train_loader"]) // ported["grad_accum"]
    assert trainer.step == trainer.num_training_steps == steps == 4
    assert trainer.optimizer.param_groups[0]["lr"] == 0.0  # the schedule ended on the last step
    assert [e.step for e in result.eval_history] == [2, 4]
    # the accuracy is the hand count over the whole eval set (16 + 8 items), same autocast
    model.eval()
    correct = count = 0
    with torch.no_grad(), trainer.mp.autocast():
        for batch in ported["eval_loader"]:
            correct += int((model(**batch).logits.argmax(-1) == batch["labels"]).sum())
            count += len(batch["labels"])
    assert count == 24
    assert result.last_eval.metrics == {"accuracy": correct / count}


def test_the_ported_loop_in_fp32_is_bitwise_the_hand_written_loop():
    pytest.importorskip("transformers", reason="transformers is not installed")
    if torch.cuda.is_available():
        pytest.skip("the Trainer would train on the GPU; the hand-written loop runs on the CPU")
    setup, before, after = blocks()
    assert after.count('precision="auto"') == 1
    hand = run(setup, before)
    ported = run(setup, after.replace('precision="auto"', 'precision="fp32"'))
    assert ported["trainer"].step == hand["num_training_steps"]
    expected = hand["model"].state_dict()
    for name, tensor in ported["model"].state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    accuracy = ported["result"].last_eval.metrics["accuracy"]
    assert accuracy == hand["correct"] / hand["count"]
