"""``--model`` strings: built-ins, factories from the current folder, the forms a factory may
return, library models and the errors for each mistake."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
import torch

from ampkit.errors import ConfigurationError, MissingDependencyError
from ampkit.models.resolve import BuiltModel, build_model, logits_loss
from ampkit.precision.batches import batch_loss

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAS_TRANSFORMERS, reason="needs transformers: pip install 'ampkit[hf]'"
)


def test_builtins_follow_the_trainer_batch_convention():
    gpt = build_model("gpt", batch_size=2)
    x, y = gpt.batch(1)
    assert x.shape == (2, 128) and gpt.unit == "tokens" and gpt.tokens_per_sample == 128
    assert torch.equal(gpt.loss(gpt.model, (x, y)), batch_loss(gpt.model, (x, y)))
    net = build_model("convnet", batch_size=3)
    images, labels = net.example_batch
    expected = torch.nn.functional.cross_entropy(net.model(images), labels)
    assert torch.equal(net.loss(net.model, (images, labels)), expected)
    assert net.tokens_per_sample is None


USER_MODULE = """
import torch

class DictModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, features, mask):
        return {"logits": self.fc(features * mask)}

def with_logits(batch_size: int = 5):
    torch.manual_seed(0)
    inputs = {"features": torch.randn(batch_size, 4), "mask": torch.ones(batch_size, 4)}
    return DictModel(), inputs, torch.randint(0, 3, (batch_size,))

class LossModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        return {"loss": (self.fc(x).squeeze(-1) - labels).pow(2).mean()}

def with_loss():
    return LossModel(), {"x": torch.ones(2, 4), "labels": torch.zeros(2)}

def with_closure():
    model = torch.nn.Linear(2, 1)
    return model, lambda: model(torch.ones(1, 2)).sum()
"""


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A user's module in the current folder, which is not on sys.path."""
    (tmp_path / "my_hf_style_models.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("my_hf_style_models", None)


def test_factory_is_imported_from_the_current_folder_with_dict_inputs(user_folder):
    built = build_model("my_hf_style_models:with_logits", batch_size=6)
    inputs, targets = built.example_batch
    assert built.batch_size == 6 and built.items_per_step == 6
    out = built.model(**inputs)["logits"]
    expected = torch.nn.functional.cross_entropy(out, targets)
    assert torch.equal(built.loss(built.model, built.example_batch), expected)
    assert str(user_folder) not in sys.path  # the folder was only added for the import


def test_factory_returning_model_and_batch_uses_the_models_loss(user_folder):
    built = build_model("my_hf_style_models:with_loss")
    assert built.loss_fn is None and built.batch_size == 2
    assert float(built.loss(built.model, built.example_batch).detach()) >= 0


def test_closure_factories_are_refused_where_copies_are_trained(user_folder):
    with pytest.raises(ConfigurationError, match=r"only `ampkit doctor` can use it"):
        build_model("my_hf_style_models:with_closure")


def test_logits_loss_flattens_sequences_and_ignores_minus_100():
    logits = torch.randn(2, 5, 7)
    targets = torch.randint(0, 7, (2, 5))
    targets[0, 0] = -100
    expected = torch.nn.functional.cross_entropy(logits.reshape(10, 7), targets.reshape(10))
    assert torch.equal(logits_loss({"logits": logits}, targets), expected)
    with pytest.raises(ConfigurationError, match="holds no logits"):
        logits_loss({"loss": torch.tensor(1.0)}, targets)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("gpt2", "Did you mean 'hf:gpt2'?"),
        ("resnet", "is not a model"),
        ("hf:", "names no model"),
        ("nonexistent_pkg_xyz:build", "cannot import module 'nonexistent_pkg_xyz'"),
    ],
)
def test_bad_specs_name_the_argument_and_the_forms(spec, needle):
    with pytest.raises(ConfigurationError, match="^model: ") as info:
        build_model(spec)
    assert needle in str(info.value) and info.value.argument == "model"


def test_batch_size_is_validated():
    with pytest.raises(ConfigurationError, match="^batch_size: 0 is invalid") as info:
        build_model("gpt", batch_size=0)
    assert info.value.argument == "batch_size"


@needs_transformers
@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("hf:gpt3", "Did you mean 'gpt2'?"),
        ("hf:gpt2:n_layers=3", "has no setting 'n_layers'. Did you mean 'n_layer'?"),
        ("hf:gpt2:huge", "has the option 'huge'"),
        ("hf:gpt2:tiny,seq_len=4096", "seq_len=4096 is invalid"),
    ],
)
def test_hf_mistakes_are_configuration_errors(spec, needle):
    with pytest.raises(ConfigurationError) as info:
        build_model(spec)
    assert needle in str(info.value)


@needs_transformers
def test_hf_model_types_and_options_build_without_network():
    built = build_model("hf:llama:tiny,seq_len=8,num_hidden_layers=1", batch_size=2)
    assert type(built.model).__name__ == "LlamaForCausalLM"
    assert built.model.config.num_hidden_layers == 1 and built.model.config.hidden_size == 64
    batch = built.example_batch
    assert batch["input_ids"].shape == (2, 8) and batch["attention_mask"].shape == (2, 8)
    real = batch["attention_mask"] == 1  # labels are the ids, -100 at pad positions
    assert torch.equal(batch["labels"], batch["input_ids"].masked_fill(~real, -100))
    assert torch.equal(built.batch(3)["input_ids"], built.batch(3)["input_ids"])
    again = build_model("hf:llama:tiny,seq_len=8,num_hidden_layers=1", batch_size=2)
    assert all(
        torch.equal(a, b)
        for a, b in zip(built.model.parameters(), again.model.parameters(), strict=True)
    )


def test_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[hf\]'"):
        build_model("hf:gpt2")


def test_timm_names_its_extra_when_it_cannot_be_imported():
    try:
        import timm  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[timm\]'"):
            build_model("timm:resnet18")
    else:
        pytest.skip("timm is installed here; tests/models covers it")


def test_built_model_is_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        BuiltModel("x", torch.nn.Linear(1, 1))  # type: ignore[misc]
