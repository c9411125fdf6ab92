"""--data is memory-mapped: bytes stay bytes until a batch widens them; bad files are refused."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from ampkit import DataError
from ampkit.models import corpus as corpus_module
from ampkit.models.corpus import load_corpus


def test_a_file_is_mapped_as_uint8_and_batches_are_int64(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"hello world, " * 100)
    corpus = load_corpus(path)
    assert corpus.tokens.dtype == torch.uint8 and len(corpus) == 1300
    x, y = corpus.batch(0, 4, 8)
    assert x.dtype == y.dtype == torch.int64 and torch.equal(x[:, 1:], y[:, :-1])
    assert bytes(corpus.tokens[:5].tolist()) == b"hello"


def test_invalid_utf8_is_found_across_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "_CHUNK", 7)  # a character cut by every slice boundary
    path = tmp_path / "t.txt"
    good = "héllo wörld".encode() * 3
    path.write_bytes(good + b"\xff")
    with pytest.raises(DataError, match=f"undecodable byte at offset {len(good)}"):
        load_corpus(path)
    path.write_bytes(good)
    assert len(load_corpus(path)) == len(good)


def test_whitespace_only_file_is_empty(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b" \n\t " * 10)
    with pytest.raises(DataError, match="is empty"):
        load_corpus(path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs POSIX fork and users")
def test_unreadable_data_is_one_line():
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # traversable by any user, unlike tmp_path
    folder.chmod(0o755)
    path = folder / "secret.txt"
    path.write_text("some text " * 100)
    path.chmod(0o000)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # root reads anything, so the child drops to user nobody first
        try:
            if os.geteuid() == 0:
                os.setuid(65534)
            load_corpus(path)
            os.write(write, b"loaded")
        except BaseException as exc:  # reported to the parent, which asserts on it
            os.write(write, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(child, 0)
    shutil.rmtree(folder)
    assert message.startswith(f"DataError: --data: cannot read {path} (Permission"), message


def test_text_padded_with_nul_bytes_is_refused_wherever_the_nul_is(tmp_path):
    """``truncate -s 2G f.txt`` after 1.5 MB of text: NUL bytes past the first MiB."""
    path = tmp_path / "padded.txt"
    text = b"def f(x):\n    return x\n" * 70_000  # 1.6 MB
    path.write_bytes(text)
    os.truncate(path, 2**31)  # sparse: nothing is written
    with pytest.raises(DataError, match=f"a NUL byte at offset {len(text)} of {2**31}"):
        load_corpus(path)


def test_a_nul_in_a_later_slice_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "_CHUNK", 64)
    path = tmp_path / "t.txt"
    path.write_bytes(b"a" * 1000 + b"\x00" + b"b" * 10)
    with pytest.raises(DataError, match="a NUL byte at offset 1000 of 1011"):
        load_corpus(path)
