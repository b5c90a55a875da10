"""The driver that runs inside the sandbox: programs one after another, each on all its test cases.

This file and the two after it are never imported by the harness: their sources follow
`_tree.py`'s, in this order, in the code the sandbox runs (`runner.DRIVER_SOURCE`), and
each uses names the files before it define:
- `_driver_kernel.py` (this file): the protocol, and the driver's calls into the kernel:
  prctl and seccomp (`_Kernel`), the payload and the outputs in memfds, waiting for a case
  and sweeping what it left running;
- `_driver_program.py`: what lets the forked child run the program as `python main.py`
  would (a cheap compile, `__main__`, the encoding of returned values, the exit);
- `_driver.py`: the per-case child's setup, the job process (the cases, their frames, the
  checks that the sandbox is clean for the next program) and PID 1's loop, which its last
  line starts.
`gdpo_nemo.sandbox.isolation` compiles that text with the sandbox's interpreter and starts
it (a small bootstrap reads the code object from stdin, see `isolation._BOOTSTRAP`) inside
bubblewrap (as PID 1 of the sandbox's PID namespace) or, with the unisolated rlimits
backend, as a plain child in a new session. It must run on any CPython >= 3.8 with the
standard library only, and it imports as little as it can: its start-up time is most of a
sandboxed run's cost.

Protocol (all on the driver's own file descriptors; the program under test never holds them):
- stdin: jobs, one after another, each two parts: an 8-byte big-endian length and a
  `marshal` blob (version 4, plain types only) of the job's header, written by the harness:
  {"main_path": str, "kinds": [kind per case], "cpu_seconds": int, "wall_seconds": float,
   "memory_bytes": int, "max_processes": int | None, "max_file_bytes": int,
   "max_output_bytes": int, "max_run_output_bytes": int, "pid_namespace": bool,
   "stop_on_timeout": bool, "seccomp": bytes (a BPF filter, b"" for none),
   "guard_sites": [(byte offset, negated)] (where the filter compares with a PID to guard),
   "source": (offset, size), "layout": [(call_offset, call_size, stdin_offset, stdin_size)
   per case]}
  then an 8-byte length and the payload: the source (UTF-8), then per case a marshal blob
  (name, args, expressions) and its raw stdin, where the header says. kind is "stdio" (feed
  stdin, keep stdout), "call" (run the program, then call `name(*args)` and record the JSON
  of the return value) or "eval" (run the program, then evaluate each of `expressions` in
  its namespace and record their values, encoded by `_encode`). End of input ends the driver.
- stdout, per job: b"READY <protected 0|1>\n", then per case one header line
  b"CASE <index> <term> <number> <cpu_s> <wall_s> <out_total> <err_total> <value_total> <len_out> <len_err> <len_val> <strays>\n"
  followed by the kept stdout, stderr and value bytes; finally b"DONE <retiring 0|1>\n".
  term: "exit" (number = exit code), "signal" (number = signal), "wall" (killed at the
  wall-clock limit, or the case and its cleanup together took longer), "cpu" (SIGXCPU, or
  the case's processes together, with the cleanup of /tmp after them, used more CPU time
  than allowed; number = exit code, or minus the signal),
  "compile" (the program did not compile; stderr says why), "setup" (the driver could not
  prepare the case: a sandbox failure), "skipped" (not run: an earlier case timed out and
  the job asked to stop there). Retiring: the harness should end this sandbox, because the
  program left something that cannot be cleaned or moved a counter the next would read.

Who does what: PID 1 reads each job and forks a job process for it, which writes the
report, runs the cases and exits; PID 1 ignores SIGCHLD so that the kernel reaps job
processes without adding their counters (faults, CPU time) to PID 1's, which every program
can read in /proc/1/stat. The job process is the program's subreaper (orphans come back to
it, not to PID 1), and the seccomp filter refuses signals aimed at it.

Why one program sees nothing of another: the driver never holds a job's payload or a
program's output in its own memory. The payload goes from stdin into a memfd through a
buffer that is zeroed afterwards; each case's process is forked from the job process (whose
memory holds only headers) and reads its own part of the payload itself; outputs go from the case's memfds
to the harness with sendfile. So a forked program inherits nothing of earlier jobs.

Why the program cannot forge these frames: the driver makes itself non-dumpable
(prctl PR_SET_DUMPABLE 0), so a process of the same uid can neither ptrace it nor open
its /proc/<pid>/fd or /proc/<pid>/mem; the child closes the result descriptor before the
program runs; and as PID 1 of its namespace the driver ignores signals its descendants send
(SIGINT included: the driver ignores it). What a program returns is judged by the harness,
which alone holds the expected values.
"""

import posix as os  # the builtin half of `os`: importing `os` itself costs ~2 ms
import time

RESULT_FD_TARGET = 100  # keeps the result pipe away from the fds a program expects (0-3)
VALUE_FD = 3  # where "call"/"eval" cases write their value
COPY_CHUNK = 1 << 20  # the payload's way from stdin to its memfd (zeroed after each job)
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
CAP_SETPCAP, CAP_SYS_ADMIN, CAP_SYS_RESOURCE = 8, 21, 24
SECCOMP_MODE_FILTER = 2
KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_SETPERM = 5
KEY_SPEC_SESSION_KEYRING = -3
KEY_POSSESSOR_ALL = 0x3F000000  # possessor: everything; the uid, group, others: nothing
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}
SYS_MOUNT = {"x86_64": 165, "aarch64": 40}
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
LINUX_CAPABILITY_VERSION_3 = 0x20080522
# The driver's argument (after `-c` and its code) asking it to mount the sandbox's /proc
# with only its processes in it (procfs `subset=pid`), then drop the capabilities bubblewrap
# lent it for that (isolation.PROC_SUBSET_ARG).
PROC_SUBSET_ARG = "--proc-subset"
SIGINT = 2
SIGKILL = 9
SETUP_FAILED_STATUS = 121  # the driver could not prepare the case (a sandbox failure)
COMPILE_FAILED_STATUS = 122  # the program does not compile (stderr says why)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _Kernel:
    """prctl() and syscall() of the C library, and the seccomp filter in a form prctl takes.

    `ctypes` costs ~5 ms to import, a third of a sandboxed run, so the calls are built from
    the `_ctypes` extension alone, with `ctypes` as the fallback if that private path changes.
    """

    def __init__(self):
        self._filter = None
        self._fprog = None
        try:
            import _ctypes

            class Long(_ctypes._SimpleCData):
                _type_ = "l"

            class Char(_ctypes._SimpleCData):
                _type_ = "c"

            class Func(_ctypes.CFuncPtr):
                _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
                _restype_ = Long

            class Libc:
                _handle = _ctypes.dlopen(None, os.RTLD_NOW)

            libc = Libc()
            self.prctl = Func(("prctl", libc))
            self.syscall = Func(("syscall", libc))
            self._addressof = _ctypes.addressof
            self._char, self._array = Char, _ctypes.Array
        except Exception:
            import ctypes

            Long = ctypes.c_long
            libc = ctypes.CDLL(None, use_errno=True)
            self.prctl, self.syscall = libc.prctl, libc.syscall
            self.prctl.restype = self.syscall.restype = Long
            self._addressof = ctypes.addressof
            self._char, self._array = ctypes.c_char, ctypes.Array
        self.prctl.argtypes = (Long,) * 5
        self.syscall.argtypes = (Long,) * 6  # the number and five arguments (mount takes five)

    def _buffer(self, data):
        kind = type("Buffer", (self._array,), {"_type_": self._char, "_length_": max(1, len(data))})
        return kind.from_buffer_copy(data or b"\0")

    def prepare_filter(self, program):
        """Keep `program` (struct sock_filter[] bytes) and its struct sock_fprog for
        `install_filter`; b"" means no filter."""
        if program == self._filter:
            return
        self._filter, self._fprog = program, None
        if program:
            code = self._buffer(program)
            fprog = (len(program) // 8).to_bytes(8, "little") + self._addressof(code).to_bytes(8, "little")
            self._fprog = (code, self._buffer(fprog))

    def guard(self, sites, pid):
        """Write `pid` (or its negation) at the byte offsets `sites` of the prepared filter,
        where it compares with a placeholder (seccomp.guard_sites)."""
        if self._fprog is None:
            return
        code = self._fprog[0]
        for at, negated in sites:
            code[at : at + 4] = ((-pid if negated else pid) & 0xFFFFFFFF).to_bytes(4, "little")

    def install_filter(self):
        """Put the prepared filter on this process (and all it starts); True when done."""
        if self._fprog is None:
            return self._filter == b"" or self._filter is None
        if self.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return self.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self._addressof(self._fprog[1]), 0, 0) == 0

    def make_undumpable(self):
        """prctl(PR_SET_DUMPABLE, 0); True when it worked."""
        try:
            return self.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
        except Exception:
            return False

    def mount_proc_subset(self):
        """Allow no user namespace below the sandbox's (what bubblewrap's --disable-userns
        does, by the same sysctl), mount a /proc that holds only the sandbox's processes
        (`subset=pid`: no host-wide file at all, Linux >= 5.8) over the full one bubblewrap
        mounted, then drop every capability (bubblewrap's `--cap-add` gave PID 1
        CAP_SYS_ADMIN, CAP_SYS_RESOURCE and CAP_SETPCAP for this, in the sandbox's user
        namespace only: without them nothing can raise the sysctl again or uncover /proc).
        None when all of it worked, else what failed; the driver must not go on then. The
        kernel lets a user namespace mount procfs only beside a fully visible one:
        bubblewrap's stays underneath, covered; and only from the namespace that owns the
        mounts, which is why bubblewrap's nested user namespace (--disable-userns) is not
        used here."""
        machine = os.uname().machine
        if machine not in SYS_MOUNT or machine not in SYS_CAPSET:
            return "no system call numbers for " + machine
        limit = "/proc/sys/user/max_user_namespaces"
        try:
            fd = os.open(limit, os.O_WRONLY)
            try:
                os.write(fd, b"0\n")
            finally:
                os.close(fd)
            with open(limit, "rb") as handle:
                if handle.read().strip() != b"0":
                    return limit + " did not take 0"
        except OSError as err:
            return "%s: %s" % (limit, err)
        names = [self._buffer(text + b"\0") for text in (b"proc", b"/proc", b"proc", b"subset=pid")]
        source, target, kind, options = (self._addressof(name) for name in names)
        if self.syscall(SYS_MOUNT[machine], source, target, kind, MS_NOSUID | MS_NODEV | MS_NOEXEC, options) != 0:
            return "mount of /proc with subset=pid refused"
        # Out of the bounding set too (CAP_SETPCAP, added for this, goes last), then
        # struct __user_cap_header_struct {version, pid 0}; data[2] {effective, permitted,
        # inheritable} all 0 (the ambient set empties with the permitted one).
        for capability in (CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_SETPCAP):
            if self.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                return "capability %d stays in the bounding set" % capability
        header = self._buffer(LINUX_CAPABILITY_VERSION_3.to_bytes(4, "little") + bytes(4))
        data = self._buffer(bytes(24))
        if self.syscall(SYS_CAPSET[machine], self._addressof(header), self._addressof(data), 0, 0, 0) != 0:
            return "capset refused"
        with open("/proc/self/status", "rb") as handle:
            for line in handle.read().splitlines():
                if line[:3] == b"Cap" and line.split()[1].strip(b"0"):
                    return "capabilities left: " + line.decode()
        return None

    def new_session_keyring(self):
        """Leave the harness's session keyring for a new, empty one (a harness under a login
        session holds keys there) that only its possessors can see: every sandbox runs as
        the same uid, and a keyring the uid may view shows in the others' /proc/keys.
        Best effort."""
        try:
            number = SYS_KEYCTL.get(os.uname().machine)
            if number is not None and self.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0) >= 0:
                self.syscall(number, KEYCTL_SETPERM, KEY_SPEC_SESSION_KEYRING, KEY_POSSESSOR_ALL, 0, 0)
        except Exception:
            pass


def _pread_exact(fd, offset, size):
    """`size` bytes of `fd` from `offset`."""
    parts = []
    while size:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            raise OSError("short payload")
        parts.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _copy_range(source_fd, offset, size, target_fd):
    """Copy `size` bytes of `source_fd` from `offset` to `target_fd` (then rewound) inside
    the kernel."""
    while size:
        sent = os.sendfile(target_fd, source_fd, offset, size)
        if not sent:
            raise OSError("short payload")
        offset += sent
        size -= sent
    os.lseek(target_fd, 0, 0)


def _memfd(name, data=b""):
    fd = os.memfd_create(name, 0)
    if data:
        _write_all(fd, data)
        os.lseek(fd, 0, 0)
    return fd


def _kept(fd, cap):
    """(total size, bytes kept: at most `cap`) of a memfd."""
    total = os.fstat(fd).st_size
    return total, min(total, max(0, cap))


def _send(result_fd, fd, count):
    """Copy the first `count` bytes of memfd `fd` to the result pipe inside the kernel: the
    driver never holds a program's output in its own memory."""
    offset = 0
    while offset < count:
        sent = os.sendfile(result_fd, fd, offset, count - offset)
        if not sent:
            break
        offset += sent
    if offset < count:  # the memfd shrank under us (it cannot: the program is gone); pad
        _write_all(result_fd, bytes(count - offset))


def _read_exact(fd, size):
    """`size` bytes from `fd`, or None at end of input."""
    parts = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


class _Payload:
    """Moves a job's payload from the jobs pipe into a memfd through one reused buffer that
    is zeroed after each use, so no payload stays in the driver's memory."""

    def __init__(self):
        self.buffer = bytearray(COPY_CHUNK)

    def receive(self, jobs_fd, size):
        """A memfd holding the next `size` bytes of `jobs_fd`, or None at end of input."""
        fd = os.memfd_create("job", 0)
        view = memoryview(self.buffer)
        used = 0
        try:
            left = size
            while left:
                count = os.readv(jobs_fd, [view[: min(left, COPY_CHUNK)]])
                if not count:
                    os.close(fd)
                    return None
                used = max(used, count)
                _write_all(fd, view[:count])
                left -= count
        finally:
            view[:used] = bytes(used)
        return fd


def _wait(pid, timeout):
    """(status, cpu seconds, timed_out) of child `pid`, killing it after `timeout` seconds."""
    import select

    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    if pidfd >= 0:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000) + 1)):
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                continue
            break
        os.close(pidfd)
    else:
        # Kernels before 5.3 have no pidfd: poll waitpid with a short sleep instead.
        pause = 0.0005
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage.ru_utime + usage.ru_stime, False
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    if timed_out:
        try:
            os.killpg(pid, SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, SIGKILL)
        except OSError:
            pass
    _, status, usage = os.wait4(pid, 0)
    return status, usage.ru_utime + usage.ru_stime, timed_out


def _sweep(pid, pid_namespace):
    """Kill whatever the program left running; True if something was still alive.

    As PID 1 of a PID namespace, kill(-1) reaches every other process in it and nothing
    outside. Without that namespace (the rlimits backend) only the program's process group can be
    reached: kill(-1) there would hit every process of the uid.
    """
    strays = False
    if pid_namespace:
        while True:  # reap orphaned zombies first so they do not count as alive
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        try:
            os.kill(-1, 0)
            strays = True
            os.kill(-1, SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
    else:
        try:
            os.killpg(pid, 0)
            strays = True
            os.killpg(pid, SIGKILL)
        except OSError:
            pass
    return strays
