"""Every checkpoint of a run, verified: what ``ampkit checkpoint verify`` reports.

:func:`survey_checkpoints` takes what :func:`~ampkit.checkpoint.folder.resolve_checkpoint`
takes (a run folder, its checkpoints folder or one ``step-NNNNNNNN`` folder) and verifies every
complete checkpoint there with :func:`~ampkit.checkpoint.folder.verify_checkpoint`, the check a
load and ``resume="auto"`` do, instead of stopping at the newest valid one. Incomplete writes
(``step-N.tmp-<pid>`` folders of a process killed while writing) are listed apart: they are
never loaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampkit.checkpoint._digest import ALGORITHMS
from ampkit.checkpoint.folder import (
    checkpoint_step,
    find_checkpoints,
    incomplete_writes,
    locate_checkpoints,
    verify_checkpoint,
)
from ampkit.errors import CheckpointError

__all__ = ["CheckpointCheck", "Survey", "survey_checkpoints"]


@dataclass(frozen=True)
class CheckpointCheck:
    """One checkpoint folder and what verifying it found.

    Attributes:
        path: the ``step-NNNNNNNN`` folder.
        step: its step, from the folder name.
        problem: why it fails verification (None: it is valid).
        manifest: its manifest when valid.
        seconds: how long verifying it took.
        plain_files: for a ``torch.distributed.checkpoint`` folder ampkit did not write (no
            manifest, so no hashes), the shard files found complete by its index's sizes;
            None for ampkit's own checkpoints.
    """

    path: Path
    step: int
    problem: CheckpointError | None = None
    manifest: dict[str, Any] | None = None
    seconds: float = 0.0
    plain_files: int | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def layout(self) -> str | None:
        return None if self.manifest is None else str(self.manifest.get("layout", "full"))

    @property
    def bytes(self) -> int:
        """The bytes of the files its manifest lists (0 when it is not valid)."""
        files = (self.manifest or {}).get("files", {})
        return sum(int(entry["bytes"]) for entry in files.values())

    @property
    def files(self) -> int:
        return len((self.manifest or {}).get("files", {}))

    @property
    def digest(self) -> str | None:
        """The hash its files were verified with (``BLAKE3``, ``SHA-256``)."""
        for entry in (self.manifest or {}).get("files", {}).values():
            for key, label in ALGORITHMS.items():
                if key in entry:
                    return label
        return None


@dataclass(frozen=True)
class Survey:
    """The checkpoints found in ``root``, oldest first, and the incomplete writes beside them."""

    root: Path
    checks: list[CheckpointCheck]
    incomplete: list[Path]

    @property
    def damaged(self) -> list[CheckpointCheck]:
        return [check for check in self.checks if not check.ok]

    @property
    def newest_valid(self) -> CheckpointCheck | None:
        valid = [check for check in self.checks if check.ok]
        return valid[-1] if valid else None


def _check(path: Path, step: int, *, plain: bool = False) -> CheckpointCheck:
    """Verify one checkpoint folder (``plain``: a DCP folder ampkit did not write, as far as
    its index allows), timed."""
    from ampkit.checkpoint.sharded import check_plain_files

    started = time.perf_counter()
    found: dict[str, Any]
    try:
        if plain:
            found = {"plain_files": check_plain_files(path)}
        else:
            found = {"manifest": verify_checkpoint(path)}
    except CheckpointError as exc:
        found = {"problem": exc}
    return CheckpointCheck(path, step, seconds=time.perf_counter() - started, **found)


def survey_checkpoints(path: str | Path) -> Survey:
    """Verify every checkpoint that ``path`` names: one ``step-NNNNNNNN`` folder, or all the
    complete checkpoints of a checkpoints folder or of a run folder's ``checkpoints/``
    (:func:`~ampkit.checkpoint.folder.locate_checkpoints`, as ``checkpoint export`` reads
    it). A ``torch.distributed.checkpoint`` folder that ampkit did not write has no manifest:
    it is checked as far as its index allows
    (:func:`~ampkit.checkpoint.sharded.check_plain_files`).

    Raises:
        ConfigurationError: nothing is at ``path``, or it holds no checkpoint (the message
            says where it looked).
    """
    kind, found = locate_checkpoints(path, incomplete=True)
    if kind != "root":
        step = checkpoint_step(found) or 0
        return Survey(found.parent, [_check(found, step, plain=kind == "plain")], [])
    checks = [_check(info.path, info.step) for info in find_checkpoints(found)]
    return Survey(found, checks, incomplete_writes(found))
