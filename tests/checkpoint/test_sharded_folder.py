"""A sharded checkpoint folder holds every rank's shards, or it is not kept (and not loaded)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed.checkpoint as dcp

from ampkit import CheckpointError
from ampkit.checkpoint import sharded
from ampkit.checkpoint._digest import FileDigest
from ampkit.checkpoint.folder import (
    begin_checkpoint,
    commit_checkpoint,
    find_checkpoints,
    verify_checkpoint,
)
from ampkit.checkpoint.manifest import seal

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _shards(tmp, threads: int = 1) -> None:
    """DCP's files for one process; ``threads=2`` writes its tensors into two files."""
    state = {sharded.MODEL: {"a": torch.ones(64), "b": torch.zeros(64)}}
    writer = dcp.FileSystemWriter(str(tmp / "dcp"), thread_count=threads)
    dcp.save(state, storage_writer=writer)  # one process: DCP saves without a group


def test_shards_another_process_wrote_and_this_one_cannot_see_are_not_committed(tmp_path):
    tmp = begin_checkpoint(tmp_path, 3)
    _shards(tmp)
    elsewhere = {"dcp/__1_0.distcp": FileDigest("0" * 64, 1234)}  # hashed on rank 1's disk
    with pytest.raises(CheckpointError, match=r"lacks dcp/__1_0\.distcp, which another process"):
        commit_checkpoint(tmp, 3, {}, layout="sharded", digests=elsewhere)
    assert list(tmp_path.iterdir()) == [] and find_checkpoints(tmp_path) == []


def test_the_digests_a_rank_sends_become_the_manifest_entries(tmp_path):
    tmp = begin_checkpoint(tmp_path, 3)
    _shards(tmp)
    (name,) = sharded.shard_digests(tmp / "dcp", 0)
    sent = {f"dcp/{name}": sharded.shard_digests(tmp / "dcp", 0)[name]}
    path = commit_checkpoint(tmp, 3, {}, layout="sharded", digests=sent)
    manifest = verify_checkpoint(path)  # re-hashes every file: the sent digest is right
    assert manifest["files"][f"dcp/{name}"] == sent[f"dcp/{name}"].entry()
    assert sharded.shard_digests(path / "dcp", 1) == {}  # rank 1 wrote nothing here


def test_a_committed_checkpoint_whose_index_names_a_shard_it_lacks_is_refused(tmp_path):
    tmp = begin_checkpoint(tmp_path, 3)
    _shards(tmp, threads=2)
    files = sorted(p.name for p in (tmp / "dcp").glob("*.distcp"))
    assert len(files) == 2, files
    path = commit_checkpoint(tmp, 3, {}, layout="sharded")
    assert verify_checkpoint(path)["step"] == 3
    # as committed by a rank 0 that did not see one of the shards (an older ampkit, or a
    # commit after a failed run, which gathers no digests): the file and its entry absent
    (path / "dcp" / files[1]).unlink()
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"][f"dcp/{files[1]}"]
    reseal(path, manifest)
    with pytest.raises(CheckpointError, match=rf"index dcp/\.metadata refers to dcp/{files[1]}"):
        verify_checkpoint(path)


def reseal(path, manifest) -> None:
    """Write ``manifest`` and seal it in ``COMPLETE`` as a writer would (an attacker who
    recomputes every digest)."""
    text = json.dumps(manifest).encode()
    (path / "manifest.json").write_bytes(text)
    (path / "COMPLETE").write_bytes(seal(manifest["step"], text))
