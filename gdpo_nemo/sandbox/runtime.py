"""The files sandboxed programs can read, copied into memory: no page-cache channel.

Every sandbox used to bind /usr (and the interpreter's prefix) read-only from the host, so all
sandboxes read the cached pages of the same inodes. A program that could solve its problem
marked pages of a cold file (evicted with fadvise, brought back one byte at a time), and a
program that could not read which pages were cached without changing anything (a non-blocking
read, its own page map, or read timing alone: about 2 us cached against 110 us not) and printed
the answer it was sent, in concurrent sandboxes, in later ones and from another harness process.

So a bubblewrap sandbox now sees, of the host's files, only a copy made once per harness process
(`RuntimeRoot`) in a tmpfs (/dev/shm): the interpreter, the shared libraries it and its
extension modules load (their `ldd` closure, the dynamic loader included), its standard library
(without the CPython test suite), a few programs a Python program may start (`sh`, `env`,
`sleep`, `cat`, `true`, `false`) and /etc/ld.so.cache, each at its host path. A tmpfs holds its
pages in memory for as long as the file exists: fadvise(DONTNEED) leaves them, and without swap
nothing pages them out (the sandbox's seccomp filter also refuses madvise's MADV_COLD and
MADV_PAGEOUT, which could push a mapped page towards swap where there is some). Every page of
every file a program can open is therefore resident, always, whatever any program did: residency
probes, page maps and read timings say nothing about another program. The copy is read-only to
programs (bound read-only, and owned by root).

The copy lives under /dev/shm/gdpo-nemo-runtime-<n>, n leased host-wide
(gdpo_nemo.sandbox.leases): removed when the harness process exits, and a copy whose lease
nobody holds (its harness was killed) is removed by the next harness that makes one. Where it
cannot be made (no /dev/shm, no room, no `ldd`), sandboxes bind the host's directories as before
and `RuntimeRoot.build` says why (`Sandbox` reports it once).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.sandbox import leases

SHM = Path("/dev/shm")
LEASE_KIND, LEASE_SPAN = "runtime", 1_000_000
# Programs a sandboxed Python program may start besides the interpreter (shutil.which'd on the host).
PROGRAMS = ("sh", "env", "sleep", "cat", "true", "false")
ETC_FILES = ("/etc/ld.so.cache",)
# Left out of the standard library's copy: CPython's own test suite (tens of MB nobody imports).
SKIPPED_STDLIB = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip")
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


@dataclass
class RuntimeRoot:
    """A copy of what programs read, mirrored at host paths under `path`; `tops` are the
    top-level directories it holds (bound at the same names in the sandbox)."""

    path: Path
    tops: tuple[str, ...]
    bytes: int
    lease: leases.Lease

    @property
    def empty(self) -> Path:
        """An empty file (bound over the /proc files the sandbox hides)."""
        return self.path.parent / f"{self.path.name}.empty"

    def remove(self) -> None:
        try:
            self.empty.unlink()
        except OSError:
            pass
        shutil.rmtree(self.path, ignore_errors=True)
        self.lease.release()


_BUILT: dict[str, tuple[RuntimeRoot | None, str]] = {}
_LOCK = threading.Lock()


def runtime_root(python: str) -> tuple[RuntimeRoot | None, str]:
    """The harness process's copy for interpreter `python` (made on first use), or (None, why
    it could not be made)."""
    with _LOCK:
        if python not in _BUILT:
            _BUILT[python] = _build(python)
            root = _BUILT[python][0]
            if root is not None:
                atexit.register(root.remove)
        return _BUILT[python]


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


def _place(source: str, root: Path, sizes: list[int]) -> None:
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
        _place(os.path.normpath(os.path.join(os.path.dirname(source), link)), root, sizes)
    elif os.path.isfile(source):
        shutil.copy2(source, target, follow_symlinks=False)
        sizes.append(target.stat().st_size)


def _real_parents(path: str, root: Path, sizes: list[int]) -> None:
    """Mirror the symlinked directories on the way to `path` (/lib -> usr/lib): the host's
    top-level links are recreated by the sandbox itself, deeper ones here."""
    parts = Path(_untop(path)).parts
    for depth in range(2, len(parts)):
        prefix = str(Path(*parts[:depth]))
        if os.path.islink(prefix) and depth > 2:
            _place(prefix, root, sizes)


def _build(python: str) -> tuple[RuntimeRoot | None, str]:
    if not SHM.is_dir() or shutil.which("ldd") is None:
        return None, f"no {SHM} or no ldd: sandboxes read the host's files (their page cache is shared)"
    try:
        stdlib, dynload = _interpreter_facts(python)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"cannot ask {python} where its standard library is ({err})"
    _remove_stale()
    try:
        lease = leases.take(LEASE_KIND, LEASE_SPAN)
    except leases.LeaseError as err:
        return None, str(err)
    root = SHM / f"gdpo-nemo-runtime-{lease.number}"
    sizes: list[int] = []
    try:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(mode=0o755)
        executables = [os.path.realpath(python)] + [p for p in (shutil.which(name) for name in PROGRAMS) if p]
        for path in [python, *executables]:
            _real_parents(path, root, sizes)
            _place(path, root, sizes)
        # the standard library, without the test suite
        ignore = shutil.ignore_patterns(*SKIPPED_STDLIB)
        stdlib = _untop(stdlib)
        target = root / stdlib.lstrip("/")
        _real_parents(stdlib, root, sizes)
        shutil.copytree(stdlib, target, symlinks=True, ignore=lambda d, names: ignore(d, names) if d == stdlib else set(),
                        dirs_exist_ok=True)
        sizes.extend(p.stat().st_size for p in target.rglob("*") if p.is_file() and not p.is_symlink())
        extensions = [str(p) for p in Path(dynload).glob("*.so")] if dynload else []
        extensions += [str(p) for p in Path(stdlib).glob("lib-dynload/*.so")]
        for library in sorted(_shared_libraries(executables + extensions)):
            _real_parents(library, root, sizes)
            _place(library, root, sizes)
        for path in ETC_FILES:
            if os.path.exists(path):
                _place(path, root, sizes)
        for directory, _, _ in os.walk(root):
            os.chmod(directory, 0o755)
    except OSError as err:
        shutil.rmtree(root, ignore_errors=True)
        lease.release()
        return None, f"cannot copy the interpreter into {root} ({err}): sandboxes read the host's files"
    tops = tuple(sorted(child.name for child in root.iterdir()))
    made = RuntimeRoot(root, tops, sum(sizes), lease)
    made.empty.write_bytes(b"")
    made.empty.chmod(0o444)
    return made, ""


def _remove_stale() -> None:
    """Remove the copies of harnesses that died without cleaning up (their lease is free)."""
    try:
        found = list(SHM.glob("gdpo-nemo-runtime-*"))
    except OSError:
        return
    for path in found:
        number = path.name.rsplit("-", 1)[1]
        if number.isdigit() and not leases.is_held(LEASE_KIND, int(number)):
            shutil.rmtree(path, ignore_errors=True)
        elif number.endswith(".empty") and number[:-6].isdigit() and not leases.is_held(LEASE_KIND, int(number[:-6])):
            path.unlink(missing_ok=True)
