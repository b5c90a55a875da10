"""The files sandboxed programs can read, copied into memory: no page-cache channel.

Every sandbox used to bind /usr (and the interpreter's prefix) read-only from the host, so all
sandboxes read the cached pages of the same inodes. A program that could solve its problem
marked pages of a cold file (evicted with fadvise, brought back one byte at a time), and a
program that could not read which pages were cached without changing anything (a non-blocking
read, its own page map, or read timing alone: about 2 us cached against 110 us not) and printed
the answer it was sent, in concurrent sandboxes, in later ones and from another harness process.

So a bubblewrap sandbox now sees, of the host's files, only a copy made once per host and
interpreter (`RuntimeRoot`) in a tmpfs (/dev/shm): the interpreter, the shared libraries it and its
extension modules load (their `ldd` closure, the dynamic loader included), its standard library
(without the CPython test suite), a few programs a Python program may start (`sh`, `env`,
`sleep`, `cat`, `true`, `false`) and /etc/ld.so.cache, each at its host path. A tmpfs holds its
pages in memory for as long as the file exists: fadvise(DONTNEED) leaves them, and without swap
nothing pages them out (the sandbox's seccomp filter also refuses madvise's MADV_COLD and
MADV_PAGEOUT, which could push a mapped page towards swap where there is some). Every page of
every file a program can open is therefore resident, always, whatever any program did: residency
probes, page maps and read timings say nothing about another program. The copy is read-only to
programs (bound read-only, and owned by root).

One copy per interpreter per host, shared by every harness process that uses it: it lives
under /dev/shm/gdpo-nemo-runtime-<key>, the key a digest of the interpreter's identity (its path,
the size and time of its binary and of its standard library's os.py), so an upgraded
interpreter gets a copy of its own. The first harness to take its lock (gdpo_nemo.sandbox.leases'
directory, `runtime-<key>.lock`) exclusively without waiting builds it and marks it complete;
the others wait for a shared lock, find the mark and use the copy. Each user holds the lock
shared for its life (the kernel drops it with the process, however it ends), so a copy of another key that
nobody holds (an interpreter since upgraded) is removed by the next harness that looks; a copy
in use, or of the current key, stays (about 70 MiB a Python, until the host reboots). Where
it cannot be made (no /dev/shm, no room, no `ldd`), sandboxes bind the host's directories as
before and `Sandbox` warns once with why.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.sandbox import leases

SHM = Path("/dev/shm")
FORMAT = 1  # the copy's layout: a change here gives every interpreter a new key
# Programs a sandboxed Python program may start besides the interpreter (shutil.which'd on the host).
PROGRAMS = ("sh", "env", "sleep", "cat", "true", "false")
ETC_FILES = ("/etc/ld.so.cache",)
# Left out of the standard library's copy: CPython's own test suite (tens of MB nobody imports).
SKIPPED_STDLIB = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip")
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


COMPLETE = ".complete"


@dataclass
class RuntimeRoot:
    """A copy of what programs read, mirrored at host paths under `path`; `tops` are the
    top-level directories it holds (bound at the same names in the sandbox); `empty` an empty
    file beside it (bound over the /proc files the sandbox hides)."""

    path: Path
    tops: tuple[str, ...]
    hold: int  # the descriptor of this process's shared lock on the copy

    @property
    def empty(self) -> Path:
        return self.path / COMPLETE  # empty, read-only, made last


_BUILT: dict[str, tuple[RuntimeRoot | None, str]] = {}
_LOCK = threading.Lock()


def runtime_root(python: str) -> tuple[RuntimeRoot | None, str]:
    """The host's copy for interpreter `python` (built by the first harness that needs it), or
    (None, why it could not be had). Asked once per process and interpreter."""
    with _LOCK:
        if python not in _BUILT:
            _BUILT[python] = _shared(python)
        return _BUILT[python]


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


def _shared(python: str) -> tuple[RuntimeRoot | None, str]:
    if not SHM.is_dir() or shutil.which("ldd") is None:
        return None, f"no {SHM} or no ldd: sandboxes read the host's files (their page cache is shared)"
    try:
        stdlib, dynload = _interpreter_facts(python)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"cannot ask {python} where its standard library is ({err})"
    key = _key(python, stdlib)
    root = SHM / f"gdpo-nemo-runtime-{key}"
    try:
        locks = leases.lease_dir()
        locks.mkdir(mode=0o700, parents=True, exist_ok=True)
        hold = os.open(locks / f"runtime-{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as err:
        return None, f"cannot lock the interpreter's copy ({err}): sandboxes read the host's files"
    try:
        built, why = _hold(hold, python, stdlib, dynload, root)
    except OSError as err:
        built, why = False, f"cannot lock the interpreter's copy ({err}): sandboxes read the host's files"
    if not built:
        os.close(hold)
        return None, why
    _remove_unused(key)
    tops = tuple(sorted(child.name for child in root.iterdir() if child.is_dir()))
    return RuntimeRoot(root, tops, hold), ""


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


def _hold(hold: int, python: str, stdlib: str, dynload: str, root: Path) -> tuple[bool, str]:
    """Hold a shared lock on a complete copy at `root` through descriptor `hold`, building it
    first when nobody has: (True, "") or (False, why not). Users hold the lock shared for
    life, so nobody waits for an exclusive lock while a copy is in use: the builder is whoever
    gets it without waiting; everyone else waits, shared, for the builder to finish."""
    for _ in range(3):
        if (root / COMPLETE).is_file():
            fcntl.flock(hold, fcntl.LOCK_SH)  # waits only while a builder holds it
            if (root / COMPLETE).is_file():
                return True, ""
            fcntl.flock(hold, fcntl.LOCK_UN)
            continue
        try:
            fcntl.flock(hold, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # someone builds it (or uses a copy just made): wait for them
            fcntl.flock(hold, fcntl.LOCK_SH)
            if (root / COMPLETE).is_file():
                return True, ""
            fcntl.flock(hold, fcntl.LOCK_UN)  # their build failed: try ourselves
            continue
        if not (root / COMPLETE).is_file():
            built, why = _build(python, stdlib, dynload, root)
            if not built:
                fcntl.flock(hold, fcntl.LOCK_UN)
                return False, why
        fcntl.flock(hold, fcntl.LOCK_SH)  # in use while this process lives
        return True, ""
    return False, f"the copy at {root} could not be built by this harness or another"


def _build(python: str, stdlib: str, dynload: str, root: Path) -> tuple[bool, str]:
    """Make the copy at `root` (anything there is an unfinished build: replaced), marked
    complete last; (True, "") or (False, why not)."""
    try:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(mode=0o755)
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
        for directory, _, _ in os.walk(root):
            os.chmod(directory, 0o755)
        (root / COMPLETE).write_bytes(b"")
        (root / COMPLETE).chmod(0o444)
    except OSError as err:
        shutil.rmtree(root, ignore_errors=True)
        return False, f"cannot copy the interpreter into {root} ({err}): sandboxes read the host's files"
    return True, ""


def _remove_unused(key: str) -> None:
    """Remove the copies of other keys (interpreters since upgraded or gone) that no harness
    holds: their lock can be taken exclusively without waiting."""
    try:
        found = [path for path in SHM.glob("gdpo-nemo-runtime-*") if path.name.rsplit("-", 1)[1] != key]
    except OSError:
        return
    for path in found:
        lock = leases.lease_dir() / f"runtime-{path.name.rsplit('-', 1)[1]}.lock"
        leases.remove_unheld(lock, create=True, guarded=lambda path=path: shutil.rmtree(path, ignore_errors=True))
