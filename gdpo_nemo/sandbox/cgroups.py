"""A control group per sandbox: memory, processes and CPU bounded for the whole sandbox.

rlimits bound each process: RLIMIT_AS does not count memfds, System V shared memory, tmpfs
pages or kernel memory (extended attributes, sockets), and RLIMIT_CPU is per process. A
cgroup counts all of them for every process of one sandbox together:

- memory: `Limits.memory_bytes + Limits.tmp_bytes + SANDBOX_OVERHEAD_BYTES` (the driver and
  the interpreter's page cache), swap 0; past it the kernel's OOM killer ends a process of
  that sandbox only;
- processes and threads: `Limits.max_processes + PROCESS_OVERHEAD` (bwrap, the driver);
- CPU: at most one core's worth of time (`cpu.cfs_quota_us` / `cpu.max`), so a program's
  many busy children share one core instead of taking the machine.

Where it is made (`CgroupRoot.detect`):
- cgroup v1 (hybrid hierarchies, as on this project's CI machines), when the harness runs
  as root: a directory `gdpo-sandbox-<n>` (n leased host-wide, gdpo_nemo.sandbox.leases)
  inside the harness's own cgroup of each of the memory, pids and cpu hierarchies (so the
  harness's own limits still apply), one sub-directory per sandbox;
- cgroup v2: the directory named by the environment variable GDPO_NEMO_SANDBOX_CGROUP, which
  must be writable and have `memory` and `pids` in its `cgroup.subtree_control` (a systemd
  unit with `Delegate=yes` gives one). v2 forbids processes in a cgroup with enabled
  controllers, so the harness cannot make one inside its own cgroup.
Elsewhere there is no per-sandbox bound (the stated fallback): rlimits per process, the
sandbox's total bounded by `memory_bytes x max_processes`; `Sandbox` says so once.

A sandbox enters its cgroup before anything runs in it: bubblewrap's sandbox process waits
(`--block-fd`) until the harness has written its PID (reported on `--info-fd`) into the cgroup
(`SandboxCgroup.enter`, gdpo_nemo.sandbox.runner.start_sandbox); the rlimits backend starts
through a `/bin/sh` line that writes its own PID into the cgroup and then execs the driver.
Each sandbox's directory has a random name: a program sees its cgroup's path in
/proc/self/cgroup (relative to the harness's cgroup, where its cgroup namespace was made), and
the name tells it nothing, such as how many sandboxes ran before it.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path

from gdpo_nemo.sandbox import leases
from gdpo_nemo.sandbox.limits import MIB, Limits

CGROUP_ENV = "GDPO_NEMO_SANDBOX_CGROUP"
# A harness's cgroup directories are `gdpo-sandbox-<n>`, n leased host-wide (not its pid: two
# harnesses that are each pid 1 of their own PID namespace would share one).
CGROUP_LEASE, CGROUP_LEASE_SPAN = "cgroup", 1_000_000_000
V1_ROOT = Path("/sys/fs/cgroup")
SANDBOX_OVERHEAD_BYTES = 128 * MIB
PROCESS_OVERHEAD = 8
CPU_PERIOD_US = 100_000
# Writes its PID into each cgroup.procs file given before "--", then runs the rest.
_ENTER = 'for f do case $f in --) break;; esac; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in the v1 hierarchy of `controller` (None if absent)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path
    except (OSError, ValueError):
        pass
    return None


class SandboxCgroup:
    """The cgroup of one sandbox (one directory per controller hierarchy)."""

    def __init__(self, root: CgroupRoot, directories: dict[str, Path]):
        self.root = root
        self.directories = directories  # controller ("memory", "pids", "cpu", or "unified") -> dir
        self._limits: tuple | None = None
        self._leases: list = []

    def hold_until_removed(self, lease) -> None:
        """Release `lease` (a sandbox's uid, gdpo_nemo.sandbox.leases) only once this cgroup is
        gone, so no other sandbox gets the uid while a process of this one may still live."""
        self._leases.append(lease)

    def _release_leases(self) -> None:
        leases, self._leases = self._leases, []
        for lease in leases:
            lease.release()

    @property
    def procs_files(self) -> list[str]:
        """The cgroup.procs files a process writes its PID into to enter this cgroup."""
        return [str(directory / "cgroup.procs") for directory in self.directories.values()]

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started inside this cgroup (through `/bin/sh`, which enters it first)."""
        return ["/bin/sh", "-c", _ENTER, "gdpo-sandbox-enter", *self.procs_files, "--", *argv]

    def enter(self, pid: int) -> None:
        """Move process `pid` into this cgroup (its children, forked later, start in it)."""
        for path in self.procs_files:
            _write(Path(path), int(pid))

    def apply(self, limits: Limits, payload: int = 0) -> None:
        """Set the bounds for a job with `limits` whose payload (source and test inputs,
        held by the driver in a memfd for the job) is `payload` bytes: the harness's copy
        of the tests is not the program's memory, so the bound grows by it (in whole MiB).
        Only writes what changed."""
        payload = -(-max(0, int(payload)) // MIB) * MIB
        memory = int(limits.memory_bytes) + int(limits.tmp_bytes) + SANDBOX_OVERHEAD_BYTES + payload
        pids = int(limits.max_processes) + PROCESS_OVERHEAD
        wanted = (memory, pids)
        if wanted == self._limits:
            return
        if self.root.version == 1:
            memory_dir = self.directories["memory"]
            swap = memory_dir / "memory.memsw.limit_in_bytes"
            # memsw (memory + swap) may never be below the memory limit: order the writes.
            order = [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)]
            if self._limits is not None and memory > self._limits[0]:
                order.reverse()
            for name, value in order:
                if name.startswith("memory.memsw") and not swap.exists():
                    continue
                _write(memory_dir / name, value)
            _write(self.directories["pids"] / "pids.max", pids)
            if "cpu" in self.directories:
                _write(self.directories["cpu"] / "cpu.cfs_period_us", CPU_PERIOD_US)
                _write(self.directories["cpu"] / "cpu.cfs_quota_us", CPU_PERIOD_US)
        else:
            directory = self.directories["unified"]
            _write(directory / "memory.max", memory)
            if (directory / "memory.swap.max").exists():
                _write(directory / "memory.swap.max", 0)
            _write(directory / "pids.max", pids)
            if (directory / "cpu.max").exists():
                _write(directory / "cpu.max", f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
        self._limits = wanted

    def remove(self, wait: bool = False) -> None:
        """Kill anything left in the cgroup and remove it. Without `wait`, a cgroup whose
        processes are still dying is left to the root, which removes it later (a sandbox's
        processes die within milliseconds of their bwrap; nobody waits for that)."""
        for directory in self.directories.values():
            for pid in _pids(directory):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        # Waiting: up to a second, for processes that were killed just now to be gone.
        if self._rmdir(tries=2000 if wait else 1):
            self._release_leases()
        else:
            self.root.defer(self)

    def _rmdir(self, tries: int) -> bool:
        """Remove the directories (retrying while their last processes die); True when gone."""
        left = dict(self.directories)
        for attempt in range(tries):
            for controller, directory in list(left.items()):
                try:
                    directory.rmdir()
                    del left[controller]
                except FileNotFoundError:
                    del left[controller]
                except OSError:
                    pass
            if not left:
                return True
            if attempt + 1 < tries:
                time.sleep(0.0005)
                for directory in left.values():
                    for pid in _pids(directory):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
        self.directories = left
        return False


def _remove_stale(directory: Path) -> None:
    """Remove the cgroups of harnesses that died without cleaning up (killed, say), found
    beside ours: `gdpo-sandbox-<n>` whose lease (gdpo_nemo.sandbox.leases) nobody holds."""
    try:
        stale = [d for d in directory.glob("gdpo-sandbox-*")
                 if not (d.name.rsplit("-", 1)[1].isdigit() and leases.is_held(CGROUP_LEASE, int(d.name.rsplit("-", 1)[1])))]
    except OSError:
        return
    for parent in stale:
        root = CgroupRoot(1, {"stale": parent})
        root.close()


def _pids(directory: Path) -> list[int]:
    try:
        return [int(line) for line in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _write(path: Path, value: object) -> None:
    with open(path, "w") as handle:
        handle.write(f"{value}\n")


class CgroupRoot:
    """Where this harness makes its sandboxes' cgroups; `detect()` finds it or says why not."""

    def __init__(self, version: int, parents: dict[str, Path], lease=None):
        self.version = version
        self.parents = parents
        self.lease = lease  # the host-wide lease on the parents' name (None for a dead harness's)
        self._lock = threading.Lock()
        self._deferred: list[SandboxCgroup] = []

    def defer(self, cgroup: SandboxCgroup) -> None:
        """Remove `cgroup` later (its processes are still dying)."""
        with self._lock:
            self._deferred.append(cgroup)

    def _sweep_deferred(self) -> None:
        with self._lock:
            deferred, self._deferred = self._deferred, []
        for cgroup in deferred:
            cgroup.remove()

    @classmethod
    def detect(cls) -> tuple[CgroupRoot | None, str]:
        """(root, "") where per-sandbox cgroups can be made, else (None, why not)."""
        delegated = os.environ.get(CGROUP_ENV)
        if delegated:
            directory = Path(delegated)
            try:
                enabled = (directory / "cgroup.subtree_control").read_text().split()
            except OSError as err:
                return None, f"{CGROUP_ENV}={delegated} is not a cgroup v2 directory ({err})"
            missing = {"memory", "pids"} - set(enabled)
            if missing or not os.access(directory, os.W_OK):
                return None, f"{CGROUP_ENV}={delegated} must be writable with memory and pids enabled (missing {sorted(missing)})"
            try:
                lease = leases.take(CGROUP_LEASE, CGROUP_LEASE_SPAN)
            except leases.LeaseError as err:
                return None, str(err)
            return cls._made(2, {"unified": directory / f"gdpo-sandbox-{lease.number}"}, lease)
        if os.geteuid() != 0:
            return None, f"the harness is not root and {CGROUP_ENV} names no delegated cgroup v2 directory"
        parents = {}
        for controller in ("memory", "pids", "cpu"):
            hierarchy = V1_ROOT / controller
            own = _own_path(controller)
            if not (hierarchy / "cgroup.procs").exists() or own is None:
                if controller == "cpu":
                    continue
                return None, f"no cgroup v1 {controller} hierarchy at {hierarchy} (cgroup v2 needs {CGROUP_ENV})"
            parents[controller] = hierarchy / own.lstrip("/")
        try:
            lease = leases.take(CGROUP_LEASE, CGROUP_LEASE_SPAN)
        except leases.LeaseError as err:
            return None, str(err)
        return cls._made(1, {controller: parent / f"gdpo-sandbox-{lease.number}" for controller, parent in parents.items()}, lease)

    @classmethod
    def _made(cls, version: int, parents: dict[str, Path], lease) -> tuple[CgroupRoot | None, str]:
        root = cls(version, parents, lease)
        try:
            for parent in parents.values():
                _remove_stale(parent.parent)
                parent.mkdir(exist_ok=True)
            if version == 2:
                _write(parents["unified"] / "cgroup.subtree_control", "+memory +pids")
            probe = root.create()
            probe.apply(Limits())
            probe.remove(wait=True)
        except OSError as err:
            root.close()
            return None, f"cannot make a cgroup under {next(iter(parents.values()))} ({err})"
        return root, ""

    def create(self) -> SandboxCgroup:
        """A new, empty cgroup for one sandbox."""
        self._sweep_deferred()
        name = secrets.token_hex(8)
        directories = {}
        for controller, parent in self.parents.items():
            directory = parent / name
            directory.mkdir()
            directories[controller] = directory
        return SandboxCgroup(self, directories)

    def close(self) -> None:
        """Remove the per-harness directories (their sandboxes must be gone), then give back
        the leases their sandboxes held and the parents' name."""
        with self._lock:
            deferred, self._deferred = self._deferred, []
        for parent in self.parents.values():
            try:
                for child in parent.iterdir():
                    if child.is_dir():
                        SandboxCgroup(self, {"x": child}).remove(wait=True)
                self._deferred = []
                parent.rmdir()
            except OSError:
                pass
        for cgroup in deferred:
            cgroup._release_leases()
        if self.lease is not None:
            self.lease.release()
