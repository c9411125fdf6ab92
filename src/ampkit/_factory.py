"""Calling a user's ``--model package.module:factory`` (``ampkit doctor``, ``ampkit bench``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ampkit.errors import ConfigurationError

__all__ = ["call_factory"]


def call_factory(factory: Callable[..., Any], spec: str, expected: str, **kwargs: Any) -> Any:
    """Call ``factory(**kwargs)`` after checking that it can be called that way.

    Args:
        factory: what ``--model`` named.
        spec: ``--model``'s value, for messages.
        expected: what the factory must return, for messages.

    Raises:
        ConfigurationError: ``factory`` needs other arguments (a class such as
            ``torch.nn:Linear``, or a function of something else such as ``json:loads``).
            Errors raised inside a real factory propagate unchanged.
    """
    takes = f"only {', '.join(kwargs)}" if kwargs else "no arguments"
    problem = (
        f"--model: {spec} is not a model factory: it cannot be called with {takes} "
        "({reason}). Name a function that takes " + takes + f" and returns {expected}."
    )
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: no factory is one
        try:
            return factory(**kwargs)
        except TypeError as exc:
            raise ConfigurationError(problem.format(reason=exc)) from None
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        raise ConfigurationError(problem.format(reason=exc)) from None
    return factory(**kwargs)
