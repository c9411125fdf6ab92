"""FolderLock: one run per folder, the holder named, released however the holder ends."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ampkit import RunInUseError
from ampkit._lock import LOCK_NAME, FolderLock, lock_holder


def test_second_lock_fails_at_once_naming_the_holder(tmp_path):
    with FolderLock(tmp_path, flag="--out"):
        assert lock_holder(tmp_path) == os.getpid()
        with pytest.raises(
            RunInUseError, match=rf"--out: .* in use by another ampkit run \(PID {os.getpid()}\)"
        ) as caught:
            FolderLock(tmp_path, flag="--out").acquire()
        assert caught.value.pid == os.getpid()
    with FolderLock(tmp_path) as again:  # released on exit
        assert again.held


def test_the_kernel_releases_the_lock_of_a_killed_holder(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from ampkit._lock import FolderLock; "
            f"FolderLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunInUseError, match=f"PID {holder.pid}"):
            FolderLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with FolderLock(tmp_path) as lock:  # no stale lock after SIGKILL
        assert lock.held and (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())


def test_a_lock_held_by_the_launcher_counts_as_held(tmp_path):
    with FolderLock(tmp_path):
        shared = FolderLock(tmp_path, shared_with=os.getpid()).acquire()
        assert not shared.held  # the launcher (here: this process) holds it on its behalf


def test_a_removing_lock_deletes_its_file_and_a_late_opener_locks_the_new_one(tmp_path):
    first = FolderLock(tmp_path, remove=True).acquire()
    stale = os.open(tmp_path / LOCK_NAME, os.O_RDWR)  # opened before the holder lets go
    first.release()
    assert not (tmp_path / LOCK_NAME).exists()
    try:
        import fcntl

        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the deleted file: free, but no lock
        with FolderLock(tmp_path, remove=True) as second:  # the path's new file: the real lock
            assert second.held and (tmp_path / LOCK_NAME).exists()
            with pytest.raises(RunInUseError):
                FolderLock(tmp_path).acquire()
    finally:
        os.close(stale)
    assert not (tmp_path / LOCK_NAME).exists()
