"""Built-in models used by ``ampkit train``, the benchmarks and the tests."""

from ampkit.models.gpt import GPT, GPTConfig

__all__ = ["GPT", "GPTConfig"]
