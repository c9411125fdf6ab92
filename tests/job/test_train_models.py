"""ampkit train --model: Hugging Face models of each task kind and a factory model, on their
data, each resumed bitwise equal to the uninterrupted run."""

from __future__ import annotations

import random
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ampkit import TrainConfig
from ampkit.errors import ConfigurationError, DataError
from ampkit.job.job import train
from ampkit.job.model_data import resolve_model_data

pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

FACTORY = textwrap.dedent(
    """
    import torch

    def build(batch_size=8):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        inputs = torch.randn(batch_size, 6)
        return model, inputs, inputs[:, :3].argmax(dim=1)

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, index):
            x = torch.randn(6, generator=torch.Generator().manual_seed(index))
            return x, x[:3].argmax()

    def rows():
        return Rows()
    """
)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    words = random.Random(0).choices(["alpha", "beta", "gamma", "delta"], k=400)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(words))
    return path


@pytest.fixture
def factory_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "train_models_factory.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    return "train_models_factory"


def config(out: Path, steps: int, **options: object) -> TrainConfig:
    options = {"batch_size": 4, "seq_len": 16, "precision": "fp32", "log_every": 1, **options}
    return TrainConfig(out=str(out), steps=steps, checkpoint_every=2, **options)  # type: ignore[arg-type]


def assert_resume_is_bitwise(tmp_path: Path, **options: object) -> None:
    whole = train(config(tmp_path / "whole", 4, **options))
    train(config(tmp_path / "split", 2, **options))
    resumed = train(config(tmp_path / "split", 4, resume="auto", **options), given={"steps"})
    assert resumed.resumed_from is not None and resumed.steps == whole.steps == 4
    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "split" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.final_loss == whole.final_loss


@pytest.mark.slow
def test_causal_lm_on_a_text_file_resumes_bitwise(tmp_path, corpus):
    assert_resume_is_bitwise(tmp_path, model="hf:gpt2:tiny", data=str(corpus))


@pytest.mark.slow
def test_masked_lm_on_a_text_file_resumes_bitwise(tmp_path, corpus):
    assert_resume_is_bitwise(tmp_path, model="hf:bert-base-uncased:tiny", data=str(corpus))


@pytest.mark.slow
def test_image_classifier_on_its_own_batches_resumes_bitwise(tmp_path):
    assert_resume_is_bitwise(tmp_path, model="hf:vit:tiny")


@pytest.mark.slow
def test_factory_model_on_a_factory_dataset_resumes_bitwise(tmp_path, factory_module):
    assert_resume_is_bitwise(
        tmp_path, model=f"{factory_module}:build", data=f"{factory_module}:rows"
    )


def test_text_windows_are_the_bytes_modulo_the_vocabulary_and_the_summary_says_so(corpus):
    data = resolve_model_data(TrainConfig(model="hf:gpt2:tiny", data=str(corpus), seq_len=8))
    raw = corpus.read_bytes()
    vocab = data.built.config.vocab_size
    row = data.dataset[3]
    assert row["input_ids"].tolist() == [b % vocab for b in raw[3:11]]
    assert torch.equal(row["labels"], row["input_ids"])
    assert len(data.dataset) == len(raw) - 8 + 1
    assert f"bytes modulo the {vocab}-token vocabulary" in data.source


def test_masked_lm_windows_mask_about_15_percent_and_label_only_those(corpus):
    data = resolve_model_data(
        TrainConfig(model="hf:bert-base-uncased:tiny", data=str(corpus), seq_len=64)
    )
    raw = corpus.read_bytes()
    vocab = data.built.config.vocab_size
    row = data.dataset[0]
    chosen = row["labels"] != -100
    assert row["labels"][chosen].tolist() == [raw[i] % vocab for i in chosen.nonzero().flatten()]
    assert 1 <= int(chosen.sum()) < 64 // 2
    assert torch.equal(data.dataset[0]["input_ids"], row["input_ids"])  # a function of the index


def test_text_data_for_an_image_classifier_is_refused_in_one_line(corpus):
    with pytest.raises(ConfigurationError, match="--data: .* image classification"):
        resolve_model_data(TrainConfig(model="hf:vit:tiny", data=str(corpus)))


def test_a_factory_that_returns_no_dataset_is_refused(factory_module):
    with pytest.raises(ConfigurationError, match="returned tuple. Return a map-style"):
        resolve_model_data(
            TrainConfig(model=f"{factory_module}:build", data=f"{factory_module}:build")
        )


def test_too_few_samples_for_one_batch_is_refused(tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("abc")
    data = resolve_model_data(TrainConfig(model="hf:gpt2:tiny", data=str(tiny), seq_len=2))
    with pytest.raises(DataError, match="--batch-size: a batch of 4 samples"):
        data.validate(4)


def test_hf_model_run_writes_a_folder_transformers_loads_with_the_trained_logits(tmp_path, corpus):
    transformers = pytest.importorskip("transformers")
    from ampkit.trainer.callbacks import Callback

    class Keep(Callback):
        def on_fit_end(self, trainer, result):
            self.model = trainer.raw_model

    kept = Keep()
    options = {"batch_size": 4, "seq_len": 16, "precision": "fp32"}
    summary = train(
        TrainConfig(model="hf:gpt2:tiny", data=str(corpus), out=str(tmp_path), steps=2, **options),
        callbacks=[kept],
    )
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.arange(16)[None] % loaded.config.vocab_size
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, kept.model.eval()(ids).logits)
    assert any("Hugging Face folder" in note for note in summary.notes)


def test_save_format_hf_for_a_model_without_save_pretrained_is_refused_before_training(tmp_path):
    with pytest.raises(ConfigurationError, match="--save-format: hf .* GPT, which has no"):
        train(TrainConfig(save_format="hf", out=str(tmp_path), steps=1))
    assert not (tmp_path / "metrics.jsonl").exists()


def test_eval_data_keep_best_keeps_the_checkpoint_of_the_lowest_eval_loss(tmp_path, corpus):
    summary = train(
        TrainConfig(
            model="hf:gpt2:tiny",
            data=str(corpus),
            eval_data=str(corpus),
            eval_every=1,
            keep_best=True,
            keep_last=1,
            out=str(tmp_path),
            steps=4,
            batch_size=4,
            seq_len=16,
            precision="fp32",
            lr=0.05,
        )  # fmt: skip
    )
    losses = {e.step: e.loss for e in summary.eval_history}
    assert sorted(losses) == [1, 2, 3, 4]
    best = min(losses, key=losses.__getitem__)
    (note,) = [n for n in summary.notes if n.startswith("best eval_loss")]
    assert f"step-{best:08d}" in note
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("step"))
    assert kept == sorted({f"step-{best:08d}", "step-00000004"})


def test_patience_stops_once_the_eval_loss_stopped_falling(tmp_path, corpus):
    summary = train(
        TrainConfig(
            model="hf:gpt2:tiny",
            data=str(corpus),
            eval_data=str(corpus),
            eval_every=1,
            patience=1,
            steps=8,
            batch_size=4,
            seq_len=16,
            precision="fp32",
            lr=1.0,
            warmup_steps=0,
        )  # fmt: skip
    )
    losses = [e.loss for e in summary.eval_history]
    first_stall = next(i for i in range(1, len(losses)) if losses[i] >= min(losses[:i]))
    assert summary.steps == first_stall + 1 < 8


def test_evaluation_flags_without_eval_data_are_refused_in_one_line():
    with pytest.raises(ConfigurationError, match="--keep-best, --patience need --eval-data"):
        TrainConfig(keep_best=True, patience=2, out="r").validate()


def test_eval_accuracy_of_a_factory_classifier_keeps_the_most_accurate_checkpoint(
    tmp_path, factory_module
):
    summary = train(
        TrainConfig(
            model=f"{factory_module}:build",
            data=f"{factory_module}:rows",
            eval_data=f"{factory_module}:rows",
            metric="accuracy",
            keep_best=True,
            eval_every=1,
            keep_last=1,
            out=str(tmp_path),
            steps=3,
            batch_size=4,
            precision="fp32",
        )  # fmt: skip
    )
    accuracy = {e.step: e.metrics["accuracy"] for e in summary.eval_history}
    best = max(accuracy, key=accuracy.__getitem__)  # the first of equals is kept
    (note,) = [n for n in summary.notes if n.startswith("best eval_accuracy")]
    assert f"step-{best:08d}" in note and "(max)" in note


@pytest.fixture
def local_gpt2(tmp_path: Path) -> Path:
    """A save_pretrained folder of a tiny GPT-2 with a word-level tokenizer of its own."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    words = ["[UNK]", "alpha", "beta", "gamma", "delta"]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    folder = tmp_path / "local"
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(
        folder
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=8, n_positions=64)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def test_a_local_folder_trains_on_its_tokenizer_s_ids_and_saves_it_back(
    tmp_path, corpus, local_gpt2
):
    transformers = pytest.importorskip("transformers")
    cfg = TrainConfig(model=f"hf:{local_gpt2}", data=str(corpus), seq_len=8)
    data = resolve_model_data(cfg)
    first = corpus.read_text().split()[:8]
    assert data.dataset[0]["input_ids"].tolist() == [
        ["[UNK]", "alpha", "beta", "gamma", "delta"].index(w) for w in first
    ]
    assert "tokenised with the model's" in data.source and "400 tokens" in data.source
    out = tmp_path / "r"
    summary = train(replace(cfg, out=str(out), steps=2, batch_size=4, precision="fp32"))
    assert any("its tokenizer" in note for note in summary.notes)
    again = transformers.AutoTokenizer.from_pretrained(out / "hf")
    assert again("alpha beta")["input_ids"] == [1, 2]
