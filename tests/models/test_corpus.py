import pytest
import torch

from ampkit import DataError
from ampkit.models.corpus import load_corpus


def test_builtin_corpus_is_python_source_and_deterministic():
    a, b = load_corpus(max_bytes=50_000), load_corpus(max_bytes=50_000)
    assert len(a) == 50_000 and torch.equal(a.tokens, b.tokens)
    text = bytes(a.tokens.tolist()).decode("utf-8", errors="replace")
    assert "def " in text and "import " in text


def test_batches_are_a_function_of_seed_and_step():
    corpus = load_corpus(max_bytes=20_000)
    x1, y1 = corpus.batch(7, 4, 32, seed=1)
    x2, _ = corpus.batch(7, 4, 32, seed=1)
    x3, _ = corpus.batch(8, 4, 32, seed=1)
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)
    assert x1.shape == y1.shape == (4, 32)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the next byte


def test_ranks_split_the_global_batch():
    corpus = load_corpus(max_bytes=20_000)
    whole, _ = corpus.batch(3, 8, 16, seed=0)
    parts = [corpus.batch(3, 4, 16, seed=0, rank=r, world_size=2)[0] for r in range(2)]
    assert torch.equal(torch.cat(parts), whole)


def test_user_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("héllo wörld\n" * 100, encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.source == str(path) and len(corpus) == len(path.read_bytes())


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "does not exist"),
        (b"", "empty"),
        (b"  \n\t", "empty"),
        (b"abc\x00def", "binary"),
        (b"\xff\xfe\xfa text", "not UTF-8"),
    ],
)
def test_bad_files_raise_data_error(tmp_path, content, match):
    path = tmp_path / "data.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        load_corpus(path)


def test_directory_is_refused(tmp_path):
    with pytest.raises(DataError, match="not a file"):
        load_corpus(tmp_path)


def test_batch_too_large_for_data(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("x" * 40)
    corpus = load_corpus(path)
    with pytest.raises(DataError, match="--batch-size"):
        corpus.validate(batch_size=16, seq_len=32)
    corpus.validate(batch_size=8, seq_len=32)
