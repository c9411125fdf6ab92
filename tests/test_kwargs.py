"""check_keywords: one typed error for a keyword a class does not take, signatures intact."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass, replace

import pytest

from ampkit._kwargs import check_keywords
from ampkit.errors import KeywordError


@check_keywords(moved={"old_name": "new_name=..."})
class Plain:
    def __init__(self, first: int, *, second: str = "x") -> None:
        self.first, self.second = first, second


@check_keywords
@dataclass(frozen=True)
class Frozen:
    width: int
    height: int = 1


@check_keywords(moved={"legacy": "modern=..."})
class Open:
    def __init__(self, **options: int) -> None:
        self.options = options


def test_unknown_keyword_names_the_nearest_valid_one():
    with pytest.raises(KeywordError, match=r"^Plain: .*'secnd'\. Did you mean second\?$") as info:
        Plain(1, secnd="y")
    assert isinstance(info.value, TypeError)
    assert (info.value.keyword, info.value.suggestion, info.value.exit_code) == (
        "secnd",
        "second",
        2,
    )


def test_a_keyword_far_from_every_name_lists_them():
    with pytest.raises(KeywordError, match=r"It takes first, second\.$"):
        Plain(1, zzz=3)


def test_moved_keyword_names_its_new_form():
    with pytest.raises(
        KeywordError, match=r"^Plain\(old_name=\.\.\.\) moved: use new_name=\.\.\.\.$"
    ):
        Plain(1, old_name=2)


def test_valid_calls_and_positional_arguments_pass_through():
    assert (Plain(1, second="z").first, Plain(first=2).second) == (1, "x")
    assert Frozen(3).height == 1 and replace(Frozen(3), height=4).height == 4
    with pytest.raises(KeywordError, match="Did you mean height"):
        replace(Frozen(3), hieght=4)


def test_signature_and_type_hints_are_those_of_the_class():
    assert list(inspect.signature(Plain).parameters) == ["first", "second"]
    assert list(inspect.signature(Frozen).parameters) == ["width", "height"]
    assert typing.get_type_hints(Plain.__init__) == {
        "first": int,
        "second": str,
        "return": type(None),
    }
    assert Plain.__init__.__name__ == "__init__" and Plain.__init__.__wrapped__ is not None


def test_an_open_ended_init_is_checked_for_moved_names_only():
    assert Open(anything=1).options == {"anything": 1}
    with pytest.raises(KeywordError, match=r"Open\(legacy=\.\.\.\) moved"):
        Open(legacy=1)
