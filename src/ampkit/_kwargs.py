"""One typed error for a keyword a class does not take.

``@check_keywords`` on a class (above ``@dataclass`` for a dataclass) checks the keywords of
every call of its ``__init__`` before the call runs: an unknown one raises
:class:`~ampkit.errors.KeywordError` with the nearest valid name
(``Trainer: got an unexpected keyword argument 'steps'. Did you mean max_steps?``), and one
listed in ``moved`` the line that names its new form
(``Trainer(checkpoint_dir=...) moved: use checkpoint=CheckpointConfig(dir=...).``). The
wrapped ``__init__`` keeps its signature and type hints (``functools.wraps``: ``inspect``
and ``typing.get_type_hints`` follow ``__wrapped__``). An ``__init__`` that takes
``**kwargs`` is checked for the ``moved`` names only.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from ampkit.errors import KeywordError

__all__ = ["check_keywords", "keyword_error"]

C = TypeVar("C", bound=type)

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def keyword_error(
    owner: str, keyword: str, valid: Sequence[str], moved: Mapping[str, str] | None = None
) -> KeywordError:
    """The error for ``owner(keyword=...)``: its new form when ``moved`` lists it, else the
    nearest of ``valid`` (``difflib.get_close_matches``), else the valid names."""
    if moved and keyword in moved:
        new = moved[keyword]
        return KeywordError(
            f"{owner}({keyword}=...) moved: use {new}.", keyword=keyword, suggestion=new
        )
    close = difflib.get_close_matches(keyword, valid, n=1)
    hint = f"Did you mean {close[0]}?" if close else f"It takes {', '.join(valid)}."
    return KeywordError(
        f"{owner}: got an unexpected keyword argument {keyword!r}. {hint}",
        keyword=keyword,
        suggestion=close[0] if close else None,
    )


def _checked(cls: C, moved: Mapping[str, str]) -> C:
    init = cls.__dict__["__init__"]
    parameters = list(inspect.signature(init).parameters.values())[1:]  # after self
    valid = [p.name for p in parameters if p.kind in _NAMED]
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    known = frozenset(valid)
    owner = cls.__name__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not known.issuperset(kwargs):
            for keyword in kwargs:
                if keyword not in known and (keyword in moved or not open_ended):
                    raise keyword_error(owner, keyword, valid, moved)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


@overload
def check_keywords(cls: C, /) -> C: ...
@overload
def check_keywords(*, moved: Mapping[str, str] | None = None) -> Callable[[C], C]: ...
def check_keywords(
    cls: C | None = None, /, *, moved: Mapping[str, str] | None = None
) -> C | Callable[[C], C]:
    """Class decorator: see the module docstring. ``moved`` maps an old keyword to the text
    of its new form (``"checkpoint=CheckpointConfig(dir=...)"``)."""
    table = dict(moved or {})
    if cls is not None:
        return _checked(cls, table)
    return lambda target: _checked(target, table)
