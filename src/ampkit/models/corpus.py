"""Byte-level text data for the built-in GPT: the user's file, or Python's own sources.

The built-in corpus is the standard library's ``*.py`` files of the running interpreter, read
in sorted order: it needs no network and is the same on every machine with the same Python.

Batches are a pure function of ``(seed, step)``: the sample positions of step ``s`` do not
depend on what ran before, so a resumed run and a run split across ranks see exactly the
sequences an uninterrupted single-process run sees.

A ``--data`` file is memory-mapped, not read: the tokens are the file's own bytes (``uint8``),
paged in by the operating system as batches touch them and shared between the processes of a
``torchrun`` job, so memory stays about the size of the file however large it is. Only each
batch is widened to int64.
"""

from __future__ import annotations

import codecs
import hashlib
import mmap
import os
import stat
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from ampkit.errors import DataError
from ampkit.precision.devices import non_blocking_copy

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


#: Bytes checked per slice of a mapped file (UTF-8 validation never holds more than this).
_CHUNK = 16 << 20


def _check_text(data: mmap.mmap, path: Path) -> None:
    """Refuse a mapped file that is all whitespace, binary (a NUL byte anywhere: a file
    padded with ``truncate -s`` is NUL bytes after its text), or not UTF-8, slice by slice."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    has_text = False
    for start in range(0, len(data), _CHUNK):
        chunk = data[start : start + _CHUNK]
        nul = chunk.find(b"\x00")
        if nul >= 0:
            raise DataError(
                f"--data: {path} looks binary (a NUL byte at offset {start + nul} of "
                f"{len(data)}). ampkit trains on UTF-8 text; pass a text file."
            )
        has_text = has_text or bool(chunk.strip())
        pending = len(decoder.getstate()[0])  # bytes of a character cut by the last slice
        try:
            decoder.decode(chunk, final=start + _CHUNK >= len(data))
        except UnicodeDecodeError as exc:
            raise DataError(
                f"--data: {path} is not UTF-8 text (undecodable byte at offset "
                f"{start - pending + exc.start}). Convert it to UTF-8 or pass another file."
            ) from None
    if not has_text:
        raise DataError(f"--data: {path} is empty. Pass a UTF-8 text file with some text in it.")


def _map_text_file(path: Path) -> torch.Tensor:
    """The file's bytes as a uint8 tensor over a private (copy-on-write) memory map."""
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise DataError(
            f"--data: {path} does not exist. Pass the path of a UTF-8 text file."
        ) from None
    except OSError as exc:
        raise DataError(
            f"--data: cannot read {path} ({exc.strerror or exc}). Make the file readable, or "
            "pass another UTF-8 text file."
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise DataError(f"--data: {path} is not a file. Pass the path of a UTF-8 text file.")
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise DataError(
                    f"--data: {path} is empty. Pass a UTF-8 text file with some text in it."
                )
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except OSError as exc:
        raise DataError(
            f"--data: cannot read {path} ({exc.strerror or exc}). Make the file readable, or "
            "pass another UTF-8 text file."
        ) from None
    _check_text(data, path)
    return torch.frombuffer(data, dtype=torch.uint8)  # the tensor keeps the map alive


@dataclass(frozen=True)
class ByteCorpus:
    """A token stream of byte values (vocabulary 256) and a deterministic batch sampler.

    Attributes:
        tokens: 1-D uint8 tensor of byte values (memory-mapped for a file); batches are int64.
        source: where the text came from, for run summaries.
    """

    tokens: torch.Tensor
    source: str

    vocab_size: int = 256

    def __len__(self) -> int:
        return int(self.tokens.numel())

    def sha256(self) -> str:
        """SHA-256 of the text: tells whether a resumed run trains on the same data."""
        return hashlib.sha256(self.tokens.numpy().data).hexdigest()  # a view: no copy

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
        windows = self.tokens[starts[:, None] + offsets].long()
        non_blocking = non_blocking_copy(torch.device(device))
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
        window = self.corpus.tokens[index : index + self.seq_len + 1].long()
        return window[:-1], window[1:]


def load_corpus(path: str | Path | None = None, *, max_bytes: int = 2_000_000) -> ByteCorpus:
    """Map ``path`` as UTF-8 text, or load the built-in standard-library corpus when None.

    Raises:
        DataError: the file is missing, unreadable, empty, binary or not UTF-8.
    """
    if path is None:
        data = bytearray(stdlib_corpus_bytes(max_bytes))
        source = f"the Python {sysconfig.get_python_version()} standard library sources"
        return ByteCorpus(tokens=torch.frombuffer(data, dtype=torch.uint8), source=source)
    return ByteCorpus(tokens=_map_text_file(Path(path)), source=str(path))
