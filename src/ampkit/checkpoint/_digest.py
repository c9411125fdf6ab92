"""Files written once and hashed as they are written, so a checkpoint's manifest needs no re-read.

:func:`write_hashed` writes a file atomically (:func:`ampkit._files.atomic_write`: temporary
file, fsync, rename, folder fsync) through a :class:`HashingWriter`, which feeds every byte to
the hash on its way to the file; the digest and size it returns are those of exactly the bytes
that reached the fsynced file. A large write is hashed on a helper thread while the calling
thread writes it (both release the GIL), so hashing adds little to the time of a save.

The hash is BLAKE3 (:data:`DIGEST`; ``b3sum`` prints the same value), a cryptographic hash about
3.5x as fast as SHA-256 with SHA-NI on one core: on a 2-core machine SHA-256 alone took as long
as ``torch.save`` + fsync of the whole state (docs/benchmarks.md). Manifests written before it
hold SHA-256, which :func:`file_digest` still computes to verify them. The one table of
algorithms is :data:`ALGORITHMS`.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ampkit._files import atomic_write

__all__ = [
    "ALGORITHMS",
    "DIGEST",
    "HEX_DIGEST",
    "READ_BLOCK",
    "FileDigest",
    "HashingWriter",
    "file_digest",
    "new_hash",
    "write_hashed",
]


def _blake3(*, threads: bool = False) -> Any:
    import blake3

    return blake3.blake3(max_threads=blake3.blake3.AUTO if threads else 1)


#: The hash new manifests record for each file.
DIGEST = "blake3"
#: Hash name (the manifest key) -> the name messages use. Both digests are 32 bytes.
ALGORITHMS = {"blake3": "BLAKE3", "sha256": "SHA-256"}
#: A hex digest as the manifest stores it.
HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
#: The block :func:`file_digest` reads at a time (BLAKE3 runs at 9.5 GB/s on 2 cores with it).
READ_BLOCK = 8 << 20


_NEW: dict[str, Callable[[], Any]] = {"blake3": _blake3, "sha256": hashlib.sha256}


def new_hash(algorithm: str = DIGEST) -> Any:
    """A fresh hash object (``update``, ``hexdigest``) of ``algorithm``, one of
    :data:`ALGORITHMS`."""
    if algorithm not in _NEW:
        raise ValueError(f"unknown digest {algorithm!r}; known: {sorted(ALGORITHMS)}")
    return _NEW[algorithm]()


def file_digest(path: str | Path, algorithm: str = DIGEST) -> str:
    """The hex digest of the file at ``path`` as it is on disk.

    Read in blocks of :data:`READ_BLOCK` into one buffer (not memory-mapped: mapped pages would
    count as the process's memory while a checkpoint is verified); BLAKE3 hashes each block on
    every core.
    """
    digest = _blake3(threads=True) if algorithm == "blake3" else new_hash(algorithm)
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(min(READ_BLOCK, max(os.fstat(f.fileno()).st_size, 1 << 16)))
        view = memoryview(buffer)
        while count := f.readinto(buffer):
            digest.update(view[:count])
    return str(digest.hexdigest())


@dataclass(frozen=True)
class FileDigest:
    """The hex digest (of :attr:`algorithm`) and size in bytes of a file as written."""

    hexdigest: str
    bytes: int
    algorithm: str = DIGEST

    def entry(self) -> dict[str, Any]:
        """The manifest's record of the file: ``{algorithm: hexdigest, "bytes": size}``."""
        return {self.algorithm: self.hexdigest, "bytes": self.bytes}


class HashingWriter:
    """A write-only binary file that hashes (:data:`DIGEST`) and counts what passes through
    it to ``file``.

    ``write`` takes anything with the buffer protocol (bytes, a tensor's NumPy view), so large
    tensors go to the file from their own memory without a copy. Enough of a file for
    ``torch.save`` (``write`` and ``flush``).
    """

    #: Writes at least this large are hashed on the helper thread while being written.
    PARALLEL = 1 << 20

    def __init__(
        self,
        file: IO[bytes],
        hasher: ThreadPoolExecutor | None = None,
        stable: Collection[tuple[int, int]] = (),
    ) -> None:
        self._file = file
        self._stable = set(stable)
        self._hash = new_hash()
        self._hasher = hasher
        self._pending: list[tuple[Future, int]] = []
        self.size = 0

    def write(self, data: Any, *, stable: bool = False) -> int:
        """Write and hash ``data``; return its size.

        Args:
            stable: the caller keeps ``data`` alive and unchanged until :meth:`digest`, so a
                large write is hashed in the background after this returns (overlapping the
                next writes and the fsync). Otherwise its hash finishes before this returns
                (``torch.save`` passes memory it may reuse), unless ``data`` is exactly one of
                the ``(address, size)`` memory blocks given as ``stable`` when this writer was
                made (the storages of the CPU tensors being saved, which the caller holds).
        """
        view = memoryview(data).cast("B")
        if view.nbytes >= self.PARALLEL and self._stable and not stable:
            stable = (_address(view), view.nbytes) in self._stable
        if self._hasher is None or view.nbytes < self.PARALLEL:
            self._settle(0)
            self._hash.update(view)
            self._file.write(view)
        else:
            self._settle(self.IN_FLIGHT - view.nbytes if stable else 0)
            hashed = self._hasher.submit(self._hash.update, view)  # the one thread: in order
            self._pending.append((hashed, view.nbytes))
            try:
                self._file.write(view)  # a buffered file writes all of it, or raises
            finally:
                if not stable:
                    self._settle(0)
        self.size += view.nbytes
        return view.nbytes

    #: At most this many bytes of stable writes wait to be hashed (their memory is held).
    IN_FLIGHT = 256 << 20

    def _settle(self, keep: int) -> None:
        """Wait for queued hashes until at most ``keep`` bytes wait."""
        while self._pending and sum(n for _, n in self._pending) > max(keep, 0):
            self._pending.pop(0)[0].result()

    def flush(self) -> None:
        self._file.flush()

    def digest(self) -> FileDigest:
        """The digest and size of everything written (waits for queued hashes)."""
        self._settle(0)
        return FileDigest(self._hash.hexdigest(), self.size)


def _address(view: memoryview) -> int:
    import numpy as np

    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def write_hashed(
    path: str | Path,
    write: bytes | Callable[[HashingWriter], None],
    *,
    atomic: bool = True,
    stable: Collection[tuple[int, int]] = (),
) -> FileDigest:
    """Write ``write`` (bytes, or a function writing into the file) to ``path``, fsynced;
    return the digest and size of what was written.

    Args:
        atomic: True: through :func:`ampkit._files.atomic_write` (temporary file, rename,
            folder fsync). False: straight into ``path`` and fsynced, for a file in a
            checkpoint's temporary folder, which is made durable and renamed into place as a
            whole (:func:`ampkit.checkpoint.folder.commit_checkpoint`); on an error the
            partial file is removed.
        stable: ``(address, size)`` of memory that stays alive and unchanged during the
            call (see :meth:`HashingWriter.write`).

    Raises:
        OSError: the write failed (disk full, ...); nothing is left behind at ``path``.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="ampkit-hash") as hasher:
        writers: list[HashingWriter] = []

        def body(file: IO[bytes]) -> None:
            writer = HashingWriter(file, hasher, stable)
            writers.append(writer)
            try:
                if callable(write):
                    write(writer)
                else:
                    writer.write(write)
            except BaseException:
                writer._settle(0)  # no hash left running on memory the caller may free
                raise

        if atomic:
            atomic_write(path, body)
        else:
            target = Path(path)
            try:
                with open(target, "wb") as f:
                    body(f)
                    f.flush()
                    os.fsync(f.fileno())  # queued hashes run meanwhile
            except BaseException:
                target.unlink(missing_ok=True)
                raise
        return writers[0].digest()
