"""An exclusive lock on a folder, so that two runs never write into the same one.

The lock is ``fcntl.flock`` on ``FOLDER/.ampkit.lock``: the kernel releases it when the holder
exits, however it exits (SIGKILL included), so a crashed run never leaves a stale lock. The
file holds the holder's PID for the error message of the run that finds the folder taken. It
is the one file ampkit writes in place instead of with :func:`ampkit._files.atomic_write`: a
lock must stay on the inode the other process opens, and an atomic rename would swap the inode.
The file is not deleted while a run uses the folder. A lock made with ``remove=True`` (the
Trainer's, on its checkpoint folder) deletes its file when released, while still holding it;
a process that had opened the old file then finds, after locking it, that the path no longer
names that file, and tries again on the new one, so two processes never both hold the lock.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ampkit._process import pid_alive
from ampkit.errors import RunInUseError, StorageError

__all__ = ["LOCK_NAME", "FolderLock", "held_by", "lock_holder"]

#: The lock file's name inside the locked folder.
LOCK_NAME = ".ampkit.lock"


def lock_holder(folder: str | Path, wait_s: float = 0.5) -> int | None:
    """The PID written in ``folder``'s lock file, or None when there is none (yet).

    The holder writes its PID right after taking the lock, so an empty file, or one still
    naming a process that is gone (the previous holder), is read again for up to ``wait_s``
    seconds.
    """
    path = Path(folder) / LOCK_NAME
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            text = ""
        pid = int(text) if text.isdigit() else None
        if pid is not None and pid_alive(pid):
            return pid
        if time.monotonic() >= deadline:
            return pid
        time.sleep(0.02)


def held_by(folder: str | Path, pids: set[int]) -> bool:
    """Whether ``folder``'s lock is held now, by one of ``pids`` (the PID its file names).

    Tried with a non-blocking lock of its own: a lock that can be taken is held by nobody (and
    is let go at once); one that cannot is held, by the process the file names.
    """
    try:
        import fcntl
    except ImportError:
        return False
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock_holder(folder, wait_s=0) in pids
    finally:
        os.close(fd)  # closing releases a lock this call took
    return False


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class FolderLock:
    """Hold an exclusive lock on a folder while a run writes into it.

    Use as a context manager: ``with FolderLock(out, flag="--out"): ...``. The folder must
    exist. Only one process holds the lock at a time; a second one fails at once.

    Args:
        folder: the folder to lock.
        flag: how the user named the folder, for messages (``--out``, ``checkpoint_dir``).
        shared_with: a PID that may hold the lock on this process's behalf (the ``ampkit train
            --nproc`` launcher holds it for its torchrun workers); finding it held by that
            process counts as holding it.
        remove: delete the lock file on :meth:`release` (it stays after a crash, unlocked).

    Raises:
        RunInUseError: another process holds the lock (the message names its PID).
        StorageError: the lock file cannot be created or written (full or read-only disk).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        flag: str = "--out",
        shared_with: int | None = None,
        remove: bool = False,
    ):
        self.folder = Path(folder)
        self.flag = flag
        self.shared_with = shared_with
        self.remove = remove
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> FolderLock:
        """Take the lock, or raise; see the class docstring."""
        if self._fd is not None:
            return self
        try:
            import fcntl
        except ImportError:  # not POSIX: no advisory locks
            import warnings

            warnings.warn(
                f"{self.flag}: folder locks need POSIX fcntl, which {sys.platform} lacks; two "
                "runs on the same folder are not prevented here.",
                RuntimeWarning,
                stacklevel=2,
            )
            return self
        path = self.folder / LOCK_NAME
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise StorageError.from_os_error(
                    exc, str(path), f"{self.flag} must be a folder ampkit can write to."
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = lock_holder(self.folder)
                if holder is not None and holder == self.shared_with:
                    return self
                who = f"PID {holder}" if holder is not None else "a process whose PID is unknown"
                raise RunInUseError(
                    f"{self.flag}: {self.folder} is in use by another ampkit run ({who}); two "
                    "runs in one folder would overwrite each other's checkpoints and metrics. "
                    f"Wait for it to finish (or stop it), or pass another {self.flag} folder.",
                    pid=holder,
                ) from None
            if _same_file(fd, path):
                break
            os.close(fd)  # its holder deleted this file on release: lock the new one
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            os.close(fd)
            raise StorageError.from_os_error(exc, str(path)) from None
        self._fd = fd
        return self

    def release(self) -> None:
        """Let go of the lock (idempotent). The lock file stays."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self.remove:  # still held: a process that opened it re-checks (acquire)
                try:
                    (self.folder / LOCK_NAME).unlink()
                except OSError:
                    pass  # a file that cannot be deleted stays: the next run locks it anew
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
