"""Host-wide leases: numbers (sandbox uids, cgroup names) no two harness processes hold at once.

A per-process counter is not enough: two harness processes that are each pid 1 of their own
PID namespace (two containers on one host) counted from the same start and handed out the same
host uids, so a program in one could pass messages to a program in the other through the
kernel's per-uid tables; and cgroup directories named by pid clashed the same way.

A lease is an flock(LOCK_EX) on a file `<kind>-<number>` in one directory (`lease_dir()`), held
through an open descriptor of the harness for as long as the number is in use. The kernel drops
the lock when the descriptor closes, however the process ends, so no lease outlives its holder,
and a lock is on the file's inode, so every process that sees the directory (every process of
the host; every container given the host's /run, or the directory itself, as a mount) sees the
same leases whatever its PID namespace. Numbers are tried from a random start, so harnesses
that do not share the directory still meet only by chance (a few thousand live sandboxes among
the span's 100 million uids). Releasing unlinks the file before closing it; a taker checks, once
locked, that its descriptor is still the file at that path (the releaser may have unlinked it
between the taker's open and its lock) and moves on otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import tempfile
import threading
from pathlib import Path
from typing import Callable

from gdpo_nemo.errors import UserError

LEASE_ENV = "GDPO_NEMO_LEASE_DIR"
ROOT_LEASE_DIR = "/run/gdpo-nemo/leases"


class LeaseError(OSError):
    """No lease could be taken (the directory cannot be made, or every number is held)."""


def lease_dir() -> Path:
    """$GDPO_NEMO_LEASE_DIR, else /run/gdpo-nemo/leases for root (what every harness of the
    host shares), else a folder of this user's in the temp dir."""
    chosen = os.environ.get(LEASE_ENV)
    if chosen:
        return Path(chosen)
    if os.geteuid() == 0:
        return Path(ROOT_LEASE_DIR)
    return Path(tempfile.gettempdir()) / f"gdpo-nemo-leases-{os.geteuid()}"


class Lease:
    """A number of `kind` held by this process until `release()` (or until it ends)."""

    def __init__(self, kind: str, number: int, path: Path, fd: int):
        self.kind, self.number, self.path = kind, number, path
        self._fd: int | None = fd
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the number back (idempotent): unlink the file while still holding it, then close."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(fd)

    def __repr__(self) -> str:
        return f"Lease({self.kind!r}, {self.number}, {'held' if self.held else 'released'})"


def _path(directory: Path, kind: str, number: int) -> Path:
    return directory / f"{kind}-{number}"


_SWEPT: set = set()


def remove_unheld(lock: Path, *, create: bool = False, guarded: Callable[[], None] | None = None) -> bool:
    """Unlink the lock file `lock` if nobody holds it (an exclusive lock taken without
    waiting), after `guarded()` removed what it guards; False when it is held or cannot be
    opened. `create`: open it even if it does not exist yet (a guarded thing whose lock was
    lost). A taker that opened the file just before it went finds it gone (its inode check)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    try:
        fd = os.open(lock, flags, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if guarded is not None:
            guarded()
        os.unlink(lock)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _sweep(directory: Path, kind: str) -> None:
    """Unlink the files of `kind` nobody holds (left by harnesses that were killed), once per
    process and directory (`remove_unheld`: a file in use is never touched)."""
    if (directory, kind) in _SWEPT:
        return
    _SWEPT.add((directory, kind))
    try:
        found = list(directory.glob(f"{kind}-*"))
    except OSError:
        return
    for path in found:
        remove_unheld(path)


def lease_path(kind: str, number: int, *, directory: Path | None = None) -> Path:
    """The file whose lock is the lease on `number` of `kind`."""
    return _path(lease_dir() if directory is None else Path(directory), kind, number)


def _check(kind: str, directory: Path | None) -> Path:
    if not kind.isidentifier():
        raise UserError(f"lease kind {kind!r}: a kind is an identifier (letters, digits, underscores)")
    directory = lease_dir() if directory is None else Path(directory)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise LeaseError(err.errno, f"cannot make the lease directory {directory} ({err.strerror}); set {LEASE_ENV}") from err
    return directory


def try_take(kind: str, number: int, *, directory: Path | None = None) -> Lease | None:
    """The lease on exactly `number` of `kind`, or None when another holder has it now.
    Raises LeaseError when the lease file cannot be opened or locked."""
    directory = _check(kind, directory)
    return _lock(directory, kind, number)


def _lock(directory: Path, kind: str, number: int) -> Lease | None:
    path = _path(directory, kind, number)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as err:
        raise LeaseError(err.errno, f"cannot open {path} ({err.strerror})") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None  # held by someone
        raise LeaseError(err.errno, f"cannot lock {path} ({err.strerror})") from err
    try:
        current = os.stat(path, follow_symlinks=False).st_ino
    except FileNotFoundError:
        current = None
    if current != os.fstat(fd).st_ino:  # released (unlinked) between our open and our lock
        os.close(fd)
        return None
    return Lease(kind, number, path, fd)


def take(kind: str, span: int, *, directory: Path | None = None) -> Lease:
    """A lease on a number in [0, span) of `kind` that no other holder (of any process that
    sees the same directory) has now. Raises LeaseError when none can be taken."""
    if span < 1:
        raise UserError(f"take({kind!r}, {span}): a span is at least 1")
    directory = _check(kind, directory)
    _sweep(directory, kind)
    start = secrets.randbelow(span)
    for offset in range(min(span, 1 << 16)):
        lease = _lock(directory, kind, (start + offset) % span)
        if lease is not None:
            return lease
    raise LeaseError(errno.EBUSY, f"no free {kind} lease in {directory} after {min(span, 1 << 16)} tries")


def is_held(kind: str, number: int, *, directory: Path | None = None) -> bool:
    """Whether some process holds the lease on `number` now (for finding what a dead harness
    left behind). Takes nothing: a file found unheld is left as it is."""
    path = _path(lease_dir() if directory is None else Path(directory), kind, number)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # closing drops the probe's own shared lock
    return False
