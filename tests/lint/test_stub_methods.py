"""Which method bodies count as stubs when a call on an object of unknown type is followed."""

import ast

import pytest

from ampkit.lint.facts import _stub


def _fn(source: str) -> ast.FunctionDef:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


@pytest.mark.parametrize(
    "body",
    [
        '"""Override me."""',
        '"""Override me."""\n    pass',
        "pass",
        "...",
        "raise NotImplementedError",
        'raise NotImplementedError("subclasses train")',
    ],
)
def test_stub_bodies(body: str) -> None:
    assert _stub(_fn(f"def train_step(self, batch):\n    {body}\n"))


@pytest.mark.parametrize(
    "body",
    [
        "return self.model(batch)",
        "raise ValueError('no batch')",
        "pass\n    return 1",
        "loss = self.model(batch)\n    loss.backward()",
    ],
)
def test_bodies_that_do_something(body: str) -> None:
    assert not _stub(_fn(f"def train_step(self, batch):\n    {body}\n"))
