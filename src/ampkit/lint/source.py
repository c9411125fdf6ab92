"""Source text helpers: positions (ast byte columns to characters) and ``# ampkit: noqa``."""

from __future__ import annotations

import io
import re
import tokenize

__all__ = ["SourceText", "noqa_map"]

_NOQA = re.compile(
    r"#\s*ampkit:\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:\s*,\s*[A-Za-z]+\d+)*))?", re.IGNORECASE
)


_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class SourceText:
    """A source text with a line index for converting ast positions to offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = _LINES.findall(text)
        self.starts: list[int] = []
        offset = 0
        for line in self.lines:
            self.starts.append(offset)
            offset += len(line)
        self.starts.append(offset)

    def _char_col(self, lineno: int, byte_col: int) -> int:
        if not 1 <= lineno <= len(self.lines):
            return 0
        raw = self.lines[lineno - 1].encode("utf-8", errors="surrogatepass")
        return len(raw[: max(byte_col, 0)].decode("utf-8", errors="ignore"))

    def position(self, lineno: int, byte_col: int) -> tuple[int, int]:
        """1-based ``(line, column)`` in characters for an ast ``(lineno, col_offset)``."""
        return lineno, self._char_col(lineno, byte_col) + 1

    def offset(self, lineno: int, byte_col: int) -> int:
        """Character offset into the text of an ast ``(lineno, col_offset)``."""
        if lineno > len(self.lines):
            return len(self.text)
        return self.starts[max(lineno, 1) - 1] + self._char_col(lineno, byte_col)

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based ``(line, column)`` of a character offset."""
        lo, hi = 0, len(self.lines)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.starts[lo] + 1


def noqa_map(text: str) -> dict[int, frozenset[str] | None]:
    """Lines carrying ``# ampkit: noqa`` mapped to the codes they silence (``None``: all).

    Comments are found with :mod:`tokenize` so that the marker inside a string does not count;
    when the text cannot be tokenized, a plain line scan is used instead.
    """
    result: dict[int, frozenset[str] | None] = {}
    if _NOQA.search(text) is None:
        return result
    comments: list[tuple[int, str]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                comments.append((tok.start[0], tok.string))
    except (tokenize.TokenError, SyntaxError, ValueError):
        comments = [(i, line) for i, line in enumerate(text.splitlines(), start=1) if "#" in line]
    for lineno, comment in comments:
        match = _NOQA.search(comment)
        if match is None:
            continue
        codes = match.group("codes")
        if codes is None:
            result[lineno] = None
        else:
            previous = result.get(lineno, frozenset())
            if previous is not None:
                result[lineno] = previous | {c.strip().upper() for c in codes.split(",")}
    return result
