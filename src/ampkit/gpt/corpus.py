"""Byte-level text data for the built-in GPT: the user's file, or Python's own sources.

The built-in corpus is the standard library's ``*.py`` files of the running interpreter, read
in sorted order: it needs no network and is the same on every machine with the same Python.

Batches are a pure function of ``(seed, step)``: the sample positions of step ``s`` do not
depend on what ran before, so a resumed run and a run split across ranks see exactly the
sequences an uninterrupted single-process run sees.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from ampkit.errors import DataError

__all__ = ["ByteCorpus", "CorpusWindows", "load_corpus", "stdlib_corpus_bytes"]


def _stdlib_sources(root: Path) -> list[Path]:
    """Sorted ``*.py`` paths of the standard library, without third-party or test packages."""
    skip = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"}
    found: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in skip)
        found.extend(Path(folder) / name for name in files if name.endswith(".py"))
    return sorted(found)


def stdlib_corpus_bytes(max_bytes: int = 2_000_000) -> bytes:
    """The first ``max_bytes`` of the standard library's Python sources, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks: list[bytes] = []
    total = 0
    for path in _stdlib_sources(root):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    if not chunks:
        raise DataError(
            f"built-in corpus: no Python sources found under {root}. "
            "Pass your own text with --data FILE."
        )
    return b"".join(chunks)[:max_bytes]


def _read_text_file(path: Path) -> bytes:
    if not path.exists():
        raise DataError(f"--data: {path} does not exist. Pass the path of a UTF-8 text file.")
    if not path.is_file():
        raise DataError(f"--data: {path} is not a file. Pass the path of a UTF-8 text file.")
    data = path.read_bytes()
    if not data.strip():
        raise DataError(f"--data: {path} is empty. Pass a UTF-8 text file with some text in it.")
    if b"\x00" in data[:1_000_000]:
        raise DataError(
            f"--data: {path} looks binary (it contains NUL bytes). "
            "ampkit trains on UTF-8 text; pass a text file."
        )
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"--data: {path} is not UTF-8 text (undecodable byte at offset {exc.start}). "
            "Convert it to UTF-8 or pass another file."
        ) from None
    return data


@dataclass(frozen=True)
class ByteCorpus:
    """A token stream of byte values (vocabulary 256) and a deterministic batch sampler.

    Attributes:
        tokens: 1-D int64 tensor of byte values.
        source: where the text came from, for run summaries.
    """

    tokens: torch.Tensor
    source: str

    vocab_size: int = 256

    def __len__(self) -> int:
        return int(self.tokens.numel())

    def validate(self, batch_size: int, seq_len: int, world_size: int = 1) -> None:
        """Check that the corpus holds enough distinct windows for one global batch.

        Raises:
            DataError: the corpus is shorter than one sequence, or has fewer distinct
                ``seq_len + 1`` windows than the global batch asks for.
        """
        windows = len(self) - seq_len
        wanted = batch_size * world_size
        if windows < wanted:
            raise DataError(
                f"--batch-size: a batch of {wanted} sequences of --seq-len {seq_len} needs at "
                f"least {wanted + seq_len} bytes of text, but {self.source} has {len(self)}. "
                "Use a smaller --batch-size or --seq-len, or more text."
            )

    def batch(
        self,
        step: int,
        batch_size: int,
        seq_len: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        device: torch.device | str = "cpu",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-byte targets, each ``(batch_size, seq_len)``, for ``step``.

        The global batch of ``batch_size * world_size`` windows is drawn from a generator
        seeded by ``(seed, step)``; ``rank`` takes its contiguous slice of it.
        """
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        starts = torch.randint(
            len(self) - seq_len, (batch_size * world_size,), generator=generator
        )[rank * batch_size : (rank + 1) * batch_size]
        offsets = torch.arange(seq_len + 1)
        windows = self.tokens[starts[:, None] + offsets]
        non_blocking = torch.device(device).type == "cuda"
        if non_blocking:
            windows = windows.pin_memory()
        windows = windows.to(device, non_blocking=non_blocking)
        return windows[:, :-1], windows[:, 1:]


class CorpusWindows(torch.utils.data.Dataset):
    """Map-style dataset of every ``seq_len`` window of a corpus: item ``i`` is
    ``(tokens[i : i + seq_len], tokens[i + 1 : i + seq_len + 1])``."""

    def __init__(self, corpus: ByteCorpus, seq_len: int) -> None:
        self.corpus = corpus
        self.seq_len = seq_len

    def __len__(self) -> int:
        return max(0, len(self.corpus) - self.seq_len)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = self.corpus.tokens[index : index + self.seq_len + 1]
        return window[:-1], window[1:]


def load_corpus(path: str | Path | None = None, *, max_bytes: int = 2_000_000) -> ByteCorpus:
    """Load ``path`` as UTF-8 text, or the built-in standard-library corpus when None.

    Raises:
        DataError: the file is missing, empty, binary or not UTF-8.
    """
    if path is None:
        data = stdlib_corpus_bytes(max_bytes)
        source = f"the Python {sysconfig.get_python_version()} standard library sources"
    else:
        data = _read_text_file(Path(path))
        source = str(path)
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
    return ByteCorpus(tokens=tokens, source=source)
