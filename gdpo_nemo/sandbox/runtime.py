"""The files sandboxed programs can read: a copy in memory of their own, never shared with a live sandbox.

Every sandbox used to bind /usr (and the interpreter's prefix) read-only from the host, so all
sandboxes read the cached pages of the same inodes. A program that could solve its problem
marked pages of a cold file (evicted with fadvise, brought back one byte at a time), and a
program that could not read which pages were cached without changing anything (a non-blocking
read, its own page map, or read timing alone: about 2 us cached against 110 us not) and printed
the answer it was sent, in concurrent sandboxes, in later ones and from another harness process.
One tmpfs copy shared by every sandbox of the host (this module's first answer) kept every page
resident, but its pages were still the same pages in every sandbox: how many processes map a
page is in a program's own /proc/self/smaps (its Pss, 4 kB divided by that count), so a program
that mapped one page per 1 bit was read by a concurrent one exactly (160 of 160 bits in 9 ms).

So each bubblewrap sandbox now reads a copy (`RuntimeRoot`) that no other live sandbox reads:
the interpreter, the shared libraries it and its extension modules load (their `ldd` closure,
the dynamic loader included), its standard library (without CPython's test suite and its static
library), a few programs a Python program may start (`sh`, `env`, `sleep`, `cat`, `true`,
`false`) and /etc/ld.so.cache, each at its host path, in a tmpfs. A sandbox leases a copy for its
whole life (gdpo_nemo.sandbox.leases: an flock beside the copies, so every harness that sees them
sees the same leases) and gives it back once its processes are gone, with its uid; a copy is
made when every existing one is held (cloned from a complete one, ~50 MiB), so a host keeps one
per sandbox that ever ran alongside others, and starting a sandbox costs a lease, not a copy.
What a program does to its copy dies with its processes: the copy is read-only (a read-only bind
of root's files: no writes, times, modes or attributes; atime does not move on a read-only
mount), its pages are always resident (tmpfs: fadvise leaves them; without swap nothing pages
them out; the seccomp filter refuses madvise's MADV_COLD, MADV_PAGEOUT, MADV_HUGEPAGE and
MADV_COLLAPSE, `process_madvise`, and the page migrations `mbind`, `migrate_pages` and
`move_pages`, which could change how a page is held or where it lies), and its mappings and
locks end with its processes, before the copy goes to another sandbox. Residency probes, page
maps, map counts and page-cache read timings say nothing about another program. (A CPU's caches
are not a file's state: a program can time them; docs/sandbox.md, "What is not guaranteed".)

The copies of one interpreter live under /dev/shm/gdpo-nemo-copies-<euid>/<key>-<n>, the key a
digest of the interpreter's identity (its path, the size and time of its binary and of its
standard library's os.py), so an upgraded interpreter gets copies of its own; copies of another
key, and this key's past the first KEPT_COPIES, that no sandbox holds are removed by the next
harness that starts. Where they cannot be made
(no /dev/shm, no room, no `ldd`), sandboxes bind the host's directories and `Sandbox` warns once
with why.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.sandbox import leases
from gdpo_nemo.sandbox.notices import warn_once

SHM = Path("/dev/shm")
FORMAT = 2  # the copy's layout: a change here gives every interpreter a new key
# Programs a sandboxed Python program may start besides the interpreter (shutil.which'd on the host).
PROGRAMS = ("sh", "env", "sleep", "cat", "true", "false")
ETC_FILES = ("/etc/ld.so.cache",)
# Left out of the standard library's copy: CPython's own test suite (tens of MB nobody imports)
# and config-*, the static library and build files for embedding CPython (25 MB).
SKIPPED_STDLIB = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "config-*")
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
# The most copies of one interpreter a host makes: one per sandbox alive at the same time.
MAX_COPIES = 4096
# How long a sandbox's start waits for a copy when every copy is held and no more can be made
# (sandboxes that retire give theirs back within seconds; a pool's idle ones keep theirs).
WAIT_FOR_COPY_S = 30.0
# The copies a harness leaves at its start when nobody holds them, for the next sandboxes
# (more are made again, ~0.4 s each, when more sandboxes run at once).
KEPT_COPIES = max(8, 2 * (os.cpu_count() or 1))
# Copies made before this layout (one per host and interpreter, shared by every sandbox):
# /dev/shm/gdpo-nemo-runtime-<key>, locked by runtime-<key>.lock in the lease directory.
_SHARED_COPY = re.compile(r"gdpo-nemo-runtime-([0-9a-f]{16})")

COMPLETE = ".complete"


@dataclass
class RuntimeRoot:
    """A copy of what programs read that one sandbox holds (`lease`) for its life, mirrored at
    host paths under `path`; `tops` are the top-level directories it holds (bound at the same
    names in the sandbox); `empty` an empty file in it (bound over the /proc files the sandbox
    hides). Release it once the sandbox's processes are gone."""

    path: Path
    tops: tuple[str, ...]
    lease: leases.Lease

    @property
    def empty(self) -> Path:
        return self.path / COMPLETE  # empty, read-only, made last

    def release(self) -> None:
        self.lease.release()


class RuntimeCopies:
    """The copies of one interpreter's files on this host (`runtime_copies`); `take()` leases
    one that no other sandbox holds."""

    def __init__(self, python: str, stdlib: str, dynload: str, home: Path, key: str):
        self.python, self.stdlib, self.dynload = python, stdlib, dynload
        self.home, self.key = home, key
        self.kind = f"runtime_{key}"
        self.locks = home / "locks"

    def path(self, number: int) -> Path:
        return self.home / f"{self.key}-{number}"

    def numbers(self) -> list[int]:
        """The numbers of this interpreter's copies on the host, made or being made, in order."""
        found = []
        for path in self.home.glob(f"{self.key}-*"):
            number = path.name.rsplit("-", 1)[1]
            if number.isdigit():
                found.append(int(number))
        return sorted(found)

    def take(self) -> RuntimeRoot:
        """A copy that no sandbox of any harness on the host holds now, made if every copy is
        held; where no more can be made (a full /dev/shm: a container's is 64 MiB by default),
        the first one given back, waited for up to WAIT_FOR_COPY_S (so sandboxes take turns
        with the copies there are). Raises OSError (leases.LeaseError among them) when none
        can be had."""
        waited, why = 0.0, ""
        while waited <= WAIT_FOR_COPY_S:
            existing = self.numbers()
            for number in existing:  # the lowest free one: a host keeps as few copies as it needs
                lease = leases.try_take(self.kind, number, directory=self.locks)
                if lease is not None:
                    return self._ready(lease, existing)
            free = next(n for n in range(len(existing) + 1) if n not in existing)
            lease = leases.try_take(self.kind, free, directory=self.locks) if free < MAX_COPIES and not why else None
            if lease is not None:
                try:
                    return self._ready(lease, existing)
                except OSError as err:
                    if not existing:
                        raise
                    why = str(err)  # no room for another: wait for one of those there are
                    warn_once("runtime-copies", f"gdpo_nemo.sandbox: no room for another copy of the interpreter's "
                              f"files ({why}); sandboxes wait for one of the {len(existing)} there are")
            time.sleep(0.02)
            waited += 0.02
        raise leases.LeaseError(
            f"no copy of {self.python}'s files free or made under {self.home} within {WAIT_FOR_COPY_S:.0f} s "
            f"({len(self.numbers())} there, all held by running sandboxes; {why or 'at most ' + str(MAX_COPIES)}): "
            f"give {SHM} room for one copy (about 50 MiB) per sandbox that runs at once (e.g. docker --shm-size), "
            "or run fewer sandbox workers")

    def _ready(self, lease: leases.Lease, existing: list[int]) -> RuntimeRoot:
        path = self.path(lease.number)
        try:
            if not (path / COMPLETE).is_file():  # new, or left unfinished by a builder that died
                sources = [self.path(n) for n in existing if n != lease.number]
                _build(self.python, self.stdlib, self.dynload, path,
                       next((source for source in sources if (source / COMPLETE).is_file()), None))
            tops = tuple(sorted(child.name for child in path.iterdir() if child.is_dir()))
        except OSError:
            lease.release()
            raise
        return RuntimeRoot(path, tops, lease)


_COPIES: dict[str, tuple[RuntimeCopies | None, str]] = {}
_LOCK = threading.Lock()


def runtime_copies(python: str) -> tuple[RuntimeCopies | None, str]:
    """The host's copies of interpreter `python`'s files (one made now if none is), or (None,
    why they cannot be had). Asked once per process and interpreter."""
    with _LOCK:
        if python not in _COPIES:
            _COPIES[python] = _find(python)
        return _COPIES[python]


def _key(python: str, stdlib: str) -> str:
    real = os.path.realpath(python)
    facts = [real]
    for path in (real, os.path.join(stdlib, "os.py")):
        try:
            info = os.stat(path)
            facts += [str(info.st_size), str(info.st_mtime_ns)]
        except OSError:
            facts.append("-")
    facts += [stdlib, *PROGRAMS, *SKIPPED_STDLIB, str(FORMAT)]
    return hashlib.sha256("\0".join(facts).encode()).hexdigest()[:16]


def copies_home() -> Path:
    """Where this user's copies live: /dev/shm/gdpo-nemo-copies-<euid>."""
    return SHM / f"gdpo-nemo-copies-{os.geteuid()}"


def _own_directory(path: Path, mode: int) -> None:
    """Make directory `path` (or find it) and check it is ours alone to write: /dev/shm is
    writable by every user, and a directory someone else made there could hand our sandboxes
    their files. Raises OSError otherwise."""
    path.mkdir(mode=mode, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise PermissionError(f"{path} is not a directory that only uid {os.geteuid()} can write")
    os.chmod(path, mode)  # whatever the umask: sandboxes' uids must reach the copies


def _find(python: str) -> tuple[RuntimeCopies | None, str]:
    if not SHM.is_dir() or shutil.which("ldd") is None:
        return None, f"no {SHM} or no ldd: sandboxes read the host's files (their page cache is shared)"
    try:
        stdlib, dynload = _interpreter_facts(python)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"cannot ask {python} where its standard library is ({err})"
    key = _key(python, stdlib)
    home = copies_home()
    try:
        _own_directory(home, 0o755)
        _own_directory(home / "locks", 0o700)
        copies = RuntimeCopies(python, stdlib, dynload, home, key)
        copies.take().release()  # one complete copy, so that a sandbox's start never builds from the host
    except OSError as err:
        return None, f"cannot copy the interpreter's files into {home} ({err}): sandboxes read the host's files"
    _remove_unused(home, key)
    return copies, ""


def _interpreter_facts(python: str) -> tuple[str, str]:
    """(stdlib dir, lib-dynload dir) of `python`, asked of it."""
    done = subprocess.run(
        [python, "-S", "-I", "-c", "import sysconfig; p = sysconfig.get_paths(); print(p['stdlib']); "
         "import _struct, os; print(os.path.dirname(_struct.__file__) if hasattr(_struct, '__file__') else '')"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    stdlib, dynload = (done.stdout.splitlines() + ["", ""])[:2]
    return stdlib, dynload


def _shared_libraries(binaries: list[str]) -> set[str]:
    """Every absolute path `ldd` names for `binaries` (the loader included), symlinks as named."""
    found: set[str] = set()
    for start in range(0, len(binaries), 64):
        done = subprocess.run(["ldd", *binaries[start:start + 64]], capture_output=True, text=True, timeout=120)
        for line in done.stdout.splitlines():
            match = _LDD_LINE.search(line)
            if match:
                found.add(match.group(1))
    return found


def _untop(path: str) -> str:
    """`path` with a symlinked top-level directory replaced by its target (/lib/x -> /usr/lib/x
    on a merged-/usr system): the sandbox makes those links itself (isolation.SYSTEM_DIRS)."""
    parts = Path(path).parts
    if len(parts) > 1:
        top = os.path.join("/", parts[1])
        if os.path.islink(top):
            return os.path.normpath(os.path.join("/", os.readlink(top), *parts[2:]))
    return path


def _place(source: str, root: Path) -> None:
    """Copy host path `source` to root/source: a symlink as a symlink (and what it points to),
    a file with its mode."""
    source = _untop(source)
    target = root / source.lstrip("/")
    if target.exists() or target.is_symlink():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if os.path.islink(source):
        link = os.readlink(source)
        os.symlink(link, target)
        _place(os.path.normpath(os.path.join(os.path.dirname(source), link)), root)
    elif os.path.isfile(source):
        shutil.copy2(source, target, follow_symlinks=False)


def _real_parents(path: str, root: Path) -> None:
    """Mirror the symlinked directories on the way to `path` (/lib -> usr/lib): the host's
    top-level links are recreated by the sandbox itself, deeper ones here."""
    parts = Path(_untop(path)).parts
    for depth in range(2, len(parts)):
        prefix = str(Path(*parts[:depth]))
        if os.path.islink(prefix) and depth > 2:
            _place(prefix, root)


def _build(python: str, stdlib: str, dynload: str, root: Path, source: Path | None) -> None:
    """Make the copy at `root` (anything there is an unfinished build: replaced), from the
    complete copy `source` when there is one, else from the host; marked complete last.
    Raises OSError (and leaves nothing) when it cannot."""
    try:
        shutil.rmtree(root, ignore_errors=True)
        if source is not None:
            try:
                shutil.copytree(source, root, symlinks=True, ignore=lambda d, names: [COMPLETE] if d == str(source) else [])
            except (OSError, shutil.Error):  # e.g. removed meanwhile (another interpreter's harness): from the host
                shutil.rmtree(root, ignore_errors=True)
                source = None
        if source is None:
            root.mkdir(mode=0o755)
            _copy_host(python, stdlib, dynload, root)
        for directory, _, _ in os.walk(root):
            os.chmod(directory, 0o755)
        (root / COMPLETE).write_bytes(b"")
        (root / COMPLETE).chmod(0o444)
    except (OSError, shutil.Error) as err:
        shutil.rmtree(root, ignore_errors=True)
        raise OSError(f"cannot copy the interpreter into {root}: {err}") from err


def _copy_host(python: str, stdlib: str, dynload: str, root: Path) -> None:
    """The interpreter, the programs, the standard library, the shared libraries and /etc
    files, from the host to `root`."""
    executables = [os.path.realpath(python)] + [p for p in (shutil.which(name) for name in PROGRAMS) if p]
    for path in [python, *executables]:
        _real_parents(path, root)
        _place(path, root)
    # the standard library, without the test suite
    ignore = shutil.ignore_patterns(*SKIPPED_STDLIB)
    stdlib = _untop(stdlib)
    target = root / stdlib.lstrip("/")
    _real_parents(stdlib, root)
    shutil.copytree(stdlib, target, symlinks=True, ignore=lambda d, names: ignore(d, names) if d == stdlib else set(),
                    dirs_exist_ok=True)
    extensions = [str(p) for p in Path(dynload).glob("*.so")] if dynload else []
    extensions += [str(p) for p in Path(stdlib).glob("lib-dynload/*.so")]
    for library in sorted(_shared_libraries(executables + extensions)):
        _real_parents(library, root)
        _place(library, root)
    for path in ETC_FILES:
        if os.path.exists(path):
            _place(path, root)


def _remove_unused(home: Path, key: str) -> None:
    """Remove, when no sandbox holds them (their lease can be taken without waiting): the
    copies of other keys (interpreters since upgraded or gone), this key's copies past the
    first KEPT_COPIES (made when many sandboxes ran at once; taken lowest first, so rarely used
    again), and the shared copies of the layout before this one."""
    try:
        found = [path for path in home.glob("*-*") if path.name != "locks"]
        shared = [path for path in SHM.glob("gdpo-nemo-runtime-*") if _SHARED_COPY.fullmatch(path.name)]
    except OSError:
        return
    for path in found:
        other, number = path.name.rsplit("-", 1)
        if number.isdigit() and (other != key or int(number) >= KEPT_COPIES):
            lock = leases.lease_path(f"runtime_{other}", int(number), directory=home / "locks")
            leases.remove_unheld(lock, create=True, guarded=lambda path=path: shutil.rmtree(path, ignore_errors=True))
    for path in shared:
        lock = leases.lease_dir() / f"runtime-{_SHARED_COPY.fullmatch(path.name).group(1)}.lock"
        leases.remove_unheld(lock, create=True, guarded=lambda path=path: shutil.rmtree(path, ignore_errors=True))
