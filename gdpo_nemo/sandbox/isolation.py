"""How a sandboxed process is started: the bubblewrap command line, or the unisolated one.

bubblewrap backend (Debian package `bubblewrap`): new user, PID, network, IPC, UTS and
cgroup namespaces; no nested user namespaces; read-only binds of the system directories the
interpreter needs and nothing else (no /home, /root, /work, no sockets); a read-only root;
a private size-limited tmpfs at /tmp that is the working directory and $HOME; /dev with only
null, zero, random and urandom; a /proc of the sandbox's own PID namespace; an environment built from an allow-list; the driver as
PID 1, so the whole tree dies with it. The network namespace has only a loopback interface,
so every address outside it fails with ENETUNREACH before a packet leaves.

rlimits backend (only by explicit opt-in, `Sandbox(backend="rlimits")`): the same driver,
rlimits and seccomp filter, a new session, a temporary working directory, the same scrubbed
environment. It does not hide the file system or the network and cannot reach processes
that leave the program's process group; `Sandbox` announces it loudly every time.

When the harness runs as root, sandboxed processes run as an unprivileged uid (default
65534, "nobody"): RLIMIT_NPROC is not enforced for uid 0, so a fork bomb would only be
stopped by the kernel's global limits. `setpriv` (util-linux) switches the uid so that
Python's `subprocess` can keep using vfork, which matters when the harness is a large
training process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from gdpo_nemo.errors import UserError
from gdpo_nemo.sandbox import leases, runtime, seccomp

# Directories of the root file system made visible read-only when they exist.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The dynamic loader's cache is all of /etc the interpreter uses (Debian finds its libraries
# without it, other distributions may not); without /etc/localtime programs see UTC.
ETC_FILES = ("/etc/ld.so.cache",)
# Device nodes bound from the host. bwrap's --dev would add a writable, unbounded tmpfs at
# /dev and a devpts mount; programs need none of that.
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
DEVICE_LINKS = (("/proc/self/fd", "/dev/fd"), ("/proc/self/fd/0", "/dev/stdin"),
                ("/proc/self/fd/1", "/dev/stdout"), ("/proc/self/fd/2", "/dev/stderr"))
# Host-wide counters under /proc that a program has no use for and that programs running at
# the same time could signal each other through (issue 46: the locked-page count of vmstat,
# 64 of 64 bits in 4.4 s; forks since boot in stat, about 10 bits/s; threads running in
# loadavg): an empty read-only file is bound over each, so they read as empty. What stays readable
# is what the sandbox's own namespaces scope (its processes, its network) and what Python
# itself needs (cpuinfo, self/...); the driver takes its PID namespace's last PID from
# /proc/sys/kernel/ns_last_pid, not loadavg.
HIDDEN_PROC = (
    "vmstat", "stat", "loadavg", "meminfo", "zoneinfo", "buddyinfo", "pagetypeinfo", "interrupts", "softirqs",
    "diskstats", "schedstat", "locks", "swaps", "vmallocinfo", "slabinfo", "key-users", "sys/kernel/random/entropy_avail",
    # idle time of every CPU, and the host's count of cgroups (moved by every sandbox's start)
    "uptime", "cgroups",
)
# Directories of host-wide state under /proc, covered by an empty read-only tmpfs: pressure
# stall times of the whole machine (CPU, memory, I/O), file systems' own statistics (ext4's
# free blocks per group, its shrinker, jbd2's transactions), drivers' (the RTC's clock), and
# the kernel's file-system tables (sys/fs: open files, inodes, dentries, AIO requests of the
# whole host, and its limits), one mount where binding over each counter took five (each of
# bubblewrap's binds re-reads the whole mount table: a tenth of a fresh sandbox's start).
HIDDEN_PROC_DIRS = ("pressure", "fs", "driver", "sys/fs")
# A one-off sandbox (one program, then it ends) gets a /proc with nothing but its own
# processes instead: its driver mounts procfs with `subset=pid` over bubblewrap's (Linux >=
# 5.8), which hides every host-wide file at once, where the binds above cost ~30 mounts of
# bubblewrap's (each re-reading the mount table: ~5 ms of a fresh sandbox's start). A reused
# sandbox keeps the full /proc with the binds: its driver reads /proc/sys/kernel/ns_last_pid,
# /proc/sysvipc and /proc/net between programs to decide whether it may serve the next one.
PROC_SUBSET_ARG = "--proc-subset"  # the driver's flag (`_driver_kernel.py` has the same name)
SANDBOX_TMP = "/tmp"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Host uids of bubblewrap sandboxes when the harness is root, one per sandbox (each start of
# a pool worker's sandbox, each one-off run): far above the ranges of users, system accounts
# and /etc/subuid's usual 100000-... blocks. The kernel's per-uid tables (pipe buffer pages,
# file descriptors in flight over unix sockets, process counts) are then each sandbox's own.
# Leased host-wide (gdpo_nemo.sandbox.leases): no two harness processes, in any PID namespace,
# hold one uid at once.
SANDBOX_UID_BASE = 1_800_000_000
SANDBOX_UID_SPAN = 100_000_000


def lease_host_uid() -> leases.Lease:
    """A lease on a host uid no other sandbox of any harness on this host runs as now: the uid
    is SANDBOX_UID_BASE + lease.number; release it once the sandbox's processes are gone."""
    return leases.take("uid", SANDBOX_UID_SPAN)


def leased_uid(lease: leases.Lease) -> int:
    return SANDBOX_UID_BASE + lease.number


# The unprivileged uid/gid used when the harness is root (Debian's "nobody"/"nogroup").
DEFAULT_UNPRIVILEGED_ID = 65534
BACKENDS = ("bwrap", "rlimits")


def default_python() -> str:
    """The interpreter for sandboxed programs: /usr/bin/python3 when present, else the
    real path of the running interpreter (a virtualenv's python resolves to its base)."""
    if os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3"
    return os.path.realpath(sys.executable)


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment of a sandboxed program: an allow-list, never a copy of ours, so
    tokens and keys (HF_TOKEN, WANDB_API_KEY, AWS_*, ...) cannot leak."""
    return {"PATH": SANDBOX_PATH, "HOME": home, "PWD": home, "TMPDIR": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


# Compiles the driver with the sandbox's own interpreter (on the host, once): the marshal
# format of code objects differs between Python versions.
_COMPILE_DRIVER = (
    "import marshal, sys; sys.stdout.buffer.write(marshal.dumps("
    "compile(sys.stdin.read(), '<gdpo-sandbox-driver>', 'exec', dont_inherit=True)))"
)
# Reads the precompiled driver (its length is formatted in) from stdin and runs it; the
# job follows on the same stdin. Saves compiling ~350 lines per run (~4 ms, a fifth of a run).
_BOOTSTRAP = (
    "import marshal, posix\n"
    "size = {size}\n"
    "blob = b''\n"
    "while len(blob) < size:\n"
    "    chunk = posix.read(0, size - len(blob))\n"
    "    if not chunk:\n"
    "        raise SystemExit('truncated driver')\n"
    "    blob += chunk\n"
    "exec(marshal.loads(blob))\n"
)


def compile_driver(python: str, driver_source: str) -> bytes | None:
    """The driver as a marshalled code object for `python`, or None if that fails (the
    driver then runs from source)."""
    try:
        done = subprocess.run(
            [python, "-S", "-I", "-B", "-c", _COMPILE_DRIVER],
            input=driver_source.encode("utf-8"), capture_output=True, timeout=60, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


@dataclass(frozen=True)
class Launch:
    """One way to start the driver: argv, working directory (None: bwrap chooses), env,
    bytes to send on stdin before the job, where the program's source file lives, and
    whether the driver is PID 1 of its own PID namespace (only then may it kill every other
    process it sees)."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    stdin_prefix: bytes
    main_path: str
    pid_namespace: bool


class Isolation:
    """The command lines of one backend ("bwrap" or "rlimits") for one interpreter."""

    def __init__(self, backend: str, python: str, uid: int | None, driver_source: str, *, inet: bool = False):
        if backend not in ("bwrap", "rlimits"):
            raise UserError(f"backend must be 'bwrap' or 'rlimits', got {backend!r}")
        self.backend = backend
        self.python = python
        self.uid = uid
        self._driver = driver_source
        self._driver_code = compile_driver(python, driver_source)
        self._prefix = self._drop_privileges_prefix()
        # Built once here so that an unknown machine fails before any program runs.
        self.seccomp_filter = seccomp.filter_program(inet=inet)
        self.seccomp_guard_sites = seccomp.guard_sites(self.seccomp_filter)
        # What programs read of the host's files: a tmpfs copy that each sandbox holds alone
        # (gdpo_nemo.sandbox.runtime), else the host's directories (`runtime_note` says why).
        self.runtime, self.runtime_note = runtime.runtime_copies(python) if backend == "bwrap" else (None, "")
        # One-off sandboxes mount /proc with subset=pid (PROC_SUBSET_ARG); the runner turns
        # this off where that fails on this machine (an older kernel), and says so.
        self.proc_subset = backend == "bwrap"
        self._bwrap_head = self._bwrap_args() if backend == "bwrap" else []

    def take_root(self) -> runtime.RuntimeRoot | None:
        """A copy of the files programs read for one new bubblewrap sandbox, which it alone
        holds until `release()` (call it once the sandbox's processes are gone); None where
        sandboxes read the host's files. Raises OSError when no copy can be had."""
        return None if self.runtime is None else self.runtime.take()

    def _drop_privileges_prefix(self) -> list[str]:
        if self.uid is None:
            return []
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise RuntimeError(
                "the harness runs as root and needs `setpriv` (Debian package util-linux) to run "
                "programs as an unprivileged uid; install it or run the harness as a normal user"
            )
        return [setpriv, f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]

    def _interpreter_args(self, proc_subset: bool = False) -> list[str]:
        # -S: no site (its imports cost ~3 ms); -I: ignore PYTHON* variables and the user site;
        # -B: never write bytecode. The driver's own argument follows its code.
        code = self._driver if self._driver_code is None else _BOOTSTRAP.format(size=len(self._driver_code))
        return [self.python, "-S", "-I", "-B", "-c", code] + ([PROC_SUBSET_ARG] if proc_subset else [])

    @property
    def _stdin_prefix(self) -> bytes:
        return b"" if self._driver_code is None else self._driver_code

    def _bwrap_args(self) -> list[str]:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise RuntimeError("bubblewrap (`bwrap`) is not on PATH; install the Debian package `bubblewrap`")
        args = [
            bwrap,
            "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--as-pid-1",
            "--hostname", "sandbox",
        ]
        for path in SYSTEM_DIRS:  # merged-/usr links (/bin -> usr/bin) as the host has them
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
        if self.runtime is None:
            for path in SYSTEM_DIRS:
                if not os.path.islink(path) and os.path.isdir(path):
                    args += ["--ro-bind", path, path]
            for path in ETC_FILES:
                args += ["--ro-bind-try", path, path]
            prefix = os.path.dirname(os.path.dirname(os.path.realpath(self.python)))
            if not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
                args += ["--ro-bind", prefix, prefix]
        return args

    def _bwrap_tail(self, root: runtime.RuntimeRoot | None, proc_subset: bool = False) -> list[str]:
        """The part of bubblewrap's command line after the system's files: the copy `root`
        (only it: every file a program can read is this sandbox's alone), devices, /proc with
        its host-wide counters hidden (or, `proc_subset`, left for the driver to cover with one
        that has none: PROC_SUBSET_ARG), the read-only root, the environment. Where there are
        copies, a sandbox that starts needs its `root`: without one it has no /usr at all
        (SandboxWorker makes such a Launch only to build its jobs, and never starts it)."""
        args = []
        if root is not None:
            for top in root.tops:
                args += ["--ro-bind", str(root.path / top), f"/{top}"]
        for path in DEVICES:
            args += ["--dev-bind", path, path]
        for target, path in DEVICE_LINKS:
            args += ["--symlink", target, path]
        # The new root is a tmpfs owned by the sandbox's uid: without this remount a program
        # could fill memory through / or /dev, around the size limit of /tmp.
        args += ["--proc", "/proc"]
        # an empty file of the copy's (read-only); without the copy, /dev/null (read, it is empty too)
        hide = ["--ro-bind", str(root.empty)] if root is not None else ["--dev-bind", "/dev/null"]
        if not proc_subset:
            for name in HIDDEN_PROC:
                if os.path.exists(f"/proc/{name}"):
                    args += [*hide, f"/proc/{name}"]
            for name in HIDDEN_PROC_DIRS:
                if os.path.isdir(f"/proc/{name}"):
                    args += ["--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"]
        args += ["--remount-ro", "/", "--chdir", SANDBOX_TMP, "--clearenv"]
        for key, value in scrubbed_env(SANDBOX_TMP).items():
            args += ["--setenv", key, value]
        return args

    def launch(self, tmp_bytes: int, workdir: str | None, uid: int | None = None,
               root: runtime.RuntimeRoot | None = None, *, one_off: bool = False) -> Launch:
        """How to start the driver once. `workdir`: the rlimits backend's private directory (made by
        the caller, removed after the run); ignored by bwrap, whose /tmp is a fresh tmpfs. `uid`:
        run as this uid instead of the Sandbox's (only when the harness is root). `root`: the
        sandbox's copy of the files programs read (`take_root`), where there are copies.
        `one_off`: the sandbox runs one job and ends (its /proc then holds only its processes,
        PROC_SUBSET_ARG, where `proc_subset` is on)."""
        prefix = self._prefix
        if uid is not None and self.uid is not None:
            prefix = [self._prefix[0], f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        if self.backend == "bwrap":
            subset = one_off and self.proc_subset
            argv = (
                prefix
                + self._bwrap_head[:1]
                + ["--size", str(tmp_bytes), "--tmpfs", SANDBOX_TMP]
                # a one-off sandbox's driver holds these, in the sandbox's user namespace, until
                # it has mounted /proc and closed user namespaces itself (--disable-userns would
                # nest one, where the mount is refused)
                + (["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SYS_RESOURCE", "--cap-add", "CAP_SETPCAP"]
                   if subset else ["--disable-userns"])
                + self._bwrap_head[1:]
                + self._bwrap_tail(root, subset)
                + ["--"]
                + self._interpreter_args(subset)
            )
            return Launch(argv, None, {"PATH": SANDBOX_PATH}, self._stdin_prefix, f"{SANDBOX_TMP}/main.py", True)
        if workdir is None:
            raise UserError("the rlimits backend needs a working directory")
        argv = prefix + self._interpreter_args()
        return Launch(argv, workdir, scrubbed_env(workdir), self._stdin_prefix, os.path.join(workdir, "main.py"), False)
