"""Models with tied weights (GPT-2's lm_head shares wte's memory) checkpoint and resume exactly:
each tie is stored once, tied again on load, and resume is bitwise as for untied models."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, load_model

import ampkit


class TiedHead(torch.nn.Module):
    """A tiny language model whose output head is its embedding (as GPT-2, BERT, T5)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(50, 16)
        self.mix = torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.1)
        self.lm_head = torch.nn.Linear(16, 50, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, labels):
        logits = self.lm_head(self.drop(torch.tanh(self.mix(self.wte(input_ids)))))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def tiny_gpt2() -> torch.nn.Module:
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install -e '.[dev]')"
    )
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=100,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, vocab: int, length: int = 16) -> None:
        self.ids = torch.randint(0, vocab, (48, length), generator=torch.Generator().manual_seed(3))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def fit(make, tmp_path, name: str, vocab: int, resume=None) -> torch.nn.Module:
    torch.manual_seed(0)
    model = make()
    ampkit.Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        max_steps=4,
        precision="fp32",
        device="cpu",
        batch_size=4,
        checkpoint=ampkit.CheckpointConfig(tmp_path / name, every=2, resume=resume),
        final_weights=tmp_path / f"{name}.safetensors",
        logging=ampkit.LoggingConfig(log_every=100),
    ).fit(Tokens(vocab))
    return model


@pytest.mark.parametrize(
    "make,vocab,head,embedding",
    [
        (TiedHead, 50, "lm_head.weight", "wte.weight"),
        (tiny_gpt2, 100, "lm_head.weight", "transformer.wte.weight"),
    ],
    ids=["plain", "gpt2"],
)
def test_tied_model_checkpoints_and_resumes_bitwise(tmp_path, make, vocab, head, embedding):
    straight = fit(make, tmp_path, "straight", vocab)
    manifest = (tmp_path / "straight" / "step-00000002" / "manifest.json").read_text()
    assert f'"{head}": "{embedding}"' in manifest
    resumed = fit(make, tmp_path, "resumed", vocab, resume=tmp_path / "straight" / "step-00000002")
    params = dict(resumed.named_parameters(remove_duplicate=False))
    assert params[head] is params[embedding]  # restored in place: the tie holds
    for name, tensor in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name
    final = load_file(tmp_path / "resumed.safetensors")
    assert head not in final and torch.equal(final[embedding], straight.state_dict()[embedding])
    fresh = make()
    load_model(fresh, tmp_path / "resumed.safetensors")  # safetensors re-ties the dropped name
    assert torch.equal(fresh.state_dict()[head], straight.state_dict()[head])
