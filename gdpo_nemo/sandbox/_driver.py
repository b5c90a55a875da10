"""The driver that runs inside the sandbox: programs one after another, each on all its test cases.

This file is never imported by the harness; its source follows `_tree.py`'s in the code the
sandbox runs (`runner.DRIVER_SOURCE`). `gdpo_nemo.sandbox.isolation` compiles its text
with the sandbox's interpreter and starts it (a small bootstrap reads the code object from
stdin, see `isolation._BOOTSTRAP`) inside bubblewrap (as PID 1 of the sandbox's
PID namespace) or, with the unisolated rlimits backend, as a plain child in a new session. It must run on any
CPython >= 3.8 with the standard library only, and it imports as little as it can: its
start-up time is most of a sandboxed run's cost.

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

import marshal
import posix as os  # the builtin half of `os`: importing `os` itself costs ~2 ms
import sys
import time

RESULT_FD_TARGET = 100  # keeps the result pipe away from the fds a program expects (0-3)
VALUE_FD = 3  # where "call"/"eval" cases write their value
FD_LIMIT = 256  # RLIMIT_NOFILE of the program; competitive programs need a handful
STDERR_KEPT = 64 << 10  # stderr only serves diagnostics: its tail is rarely longer
COPY_CHUNK = 1 << 20  # the payload's way from stdin to its memfd (zeroed after each job)
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_SETPERM = 5
KEY_SPEC_SESSION_KEYRING = -3
KEY_POSSESSOR_ALL = 0x3F000000  # possessor: everything; the uid, group, others: nothing
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}
SIGINT = 2
SIGKILL = 9
FLUSH_FAILED_STATUS = 120  # what CPython exits with when flushing stdout fails at exit
SETUP_FAILED_STATUS = 121  # the driver could not prepare the case (a sandbox failure)
COMPILE_FAILED_STATUS = 122  # the program does not compile (stderr says why)
ENCODE_DEPTH = 200  # nesting of a returned value that `_encode` follows
SIGPENDING_LIMIT = 64  # queued signals and POSIX timers of the program, all its processes together


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
        for function in (self.prctl, self.syscall):
            function.argtypes = (Long,) * 5

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

    def new_session_keyring(self):
        """Leave the harness's session keyring for a new, empty one (a harness under a login
        session holds keys there) that only its possessors can see: every sandbox runs as
        the same uid, and a keyring the uid may view shows in the others' /proc/keys.
        Best effort."""
        try:
            number = SYS_KEYCTL.get(os.uname().machine)
            if number is not None and self.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0) >= 0:
                self.syscall(number, KEYCTL_SETPERM, KEY_SPEC_SESSION_KEYRING, KEY_POSSESSOR_ALL, 0)
        except Exception:
            pass


class _Captured(BaseException):
    """Raised by `_compile`'s trace hook to stop the module it captured."""


def _renamed(code, filename):
    consts = tuple(_renamed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _compile(source, filename):
    """compile(source, filename, "exec", dont_inherit=True), but cheaper.

    The builtin compile() builds every AST class on its first call (~1.5 ms, a tenth of a
    trivial run). exec() of a string compiles without them; a trace hook takes the module's
    code object at the frame's first event and raises before any of its bytecode runs.
    Syntax errors come out of exec() as they would out of compile().
    """
    captured = []

    def hook(frame, event, arg):
        captured.append(frame.f_code)
        raise _Captured

    sys.settrace(hook)
    try:
        exec(source, {})
    except _Captured:
        pass
    finally:
        sys.settrace(None)
    if not captured:
        return compile(source, filename, "exec", dont_inherit=True)
    return _renamed(captured[0], filename)


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


def _exit_status(stop):
    """The exit status CPython gives an uncaught SystemExit."""
    code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write("%s\n" % (code,))
    except Exception:
        pass
    return 1


def _report(error, main_path):
    """Print an uncaught exception like the interpreter, without the driver's own frames."""
    trace = error.__traceback__
    while trace is not None and trace.tb_frame.f_code.co_filename != main_path:
        trace = trace.tb_next
    try:
        # The printed traceback is the exception's own, so trim that one.
        sys.excepthook(type(error), error.with_traceback(trace), trace)
    except Exception:
        pass


def _flush_std():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _shutdown(status):
    """Finish like the interpreter would (join non-daemon threads, run atexit callbacks,
    flush stdio), then leave with os._exit: a full finalization of the forked interpreter
    costs a few milliseconds and has no effect a test can observe."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        sys.stdout.flush()
    except BaseException:
        status = FLUSH_FAILED_STATUS
    try:
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(status)


def _encode(value, depth=0):
    """A returned value as JSON-ready data that keeps Python's types apart: str, int, float,
    bool and None as themselves, every container as [type name, items] ("list", "tuple",
    "set", "frozenset", "dict" with [key, value] pairs, "bytes" as latin-1 text, "complex"
    as [real, imag]). Subclasses count as their base type; anything else raises TypeError."""
    if depth > ENCODE_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or type(value) in (bool, str, float):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return ["complex", [complex.__complex__(value).real, complex.__complex__(value).imag]]
    if isinstance(value, (bytes, bytearray)):
        return ["bytes", bytes(value).decode("latin-1")]
    if isinstance(value, dict):
        return ["dict", [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in dict.items(value)]]
    for kind in (list, tuple, set, frozenset):
        if isinstance(value, kind):
            return [kind.__name__, [_encode(item, depth + 1) for item in kind.__iter__(value)]]
    raise TypeError("cannot encode %s" % type(value).__name__)


def _child(header, index, payload_fd, fds, kernel):
    """Runs in the forked child: reads its case from the payload, becomes the program.
    Never returns."""
    try:
        import builtins
        import io
        import _signal

        import resource

        fd_out, fd_err, fd_val, fd_started = fds
        os.setpgid(0, 0)
        _signal.signal(SIGINT, _signal.default_int_handler)
        # Only this case's part of the payload is read (the job header says where each
        # part lies): a big test set costs each case its own input, not all of them.
        source_at, source_size = header["source"]
        raw_source = _pread_exact(payload_fd, source_at, source_size)
        source = raw_source.decode("utf-8", "surrogatepass")
        kind = header["kinds"][index]
        meta_at, meta_size, stdin_at, stdin_size = header["layout"][index]
        name, args, expressions = marshal.loads(_pread_exact(payload_fd, meta_at, meta_size))
        fd_in = os.memfd_create("stdin", 0)
        _copy_range(payload_fd, stdin_at, stdin_size, fd_in)
        main_path = header["main_path"]
        main_fd = os.open(main_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        _write_all(main_fd, raw_source)
        os.close(main_fd)
        raw_source = None
        os.dup2(fd_in, 0)
        os.dup2(fd_out, 1)
        os.dup2(fd_err, 2)
        first_free = 3
        if fd_val >= 0:
            os.dup2(fd_val, VALUE_FD)
            first_free = VALUE_FD + 1
        cpu = header["cpu_seconds"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (header["max_file_bytes"], header["max_file_bytes"]))
        resource.setrlimit(resource.RLIMIT_AS, (header["memory_bytes"], header["memory_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
        # No POSIX message queues: they would outlive the program in a reused sandbox.
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
        # Queued signals and POSIX timers count against the uid's host-wide total (the
        # harness's own, when it is not root): a program may queue a few.
        resource.setrlimit(resource.RLIMIT_SIGPENDING, (SIGPENDING_LIMIT, SIGPENDING_LIMIT))
        if header["max_processes"] is not None:
            # Counted per user namespace and uid, so the driver and the job process count too.
            nproc = header["max_processes"] + 2
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    except BaseException:
        os._exit(SETUP_FAILED_STATUS)
    try:
        code = _compile(source, main_path)
    except BaseException as err:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError
        if isinstance(err, SyntaxError):
            err.filename = main_path
        try:
            _write_all(2, ("%s: %s\n" % (type(err).__name__, err)).encode("utf-8", "backslashreplace"))
        finally:
            os._exit(COMPILE_FAILED_STATUS)
    try:
        source = None
        sys.stdin = sys.__stdin__ = io.open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = sys.__stdout__ = io.open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = sys.__stderr__ = io.open(
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        )
        sys.argv = [main_path]
        main = type(sys)("__main__")
        main.__file__ = main_path
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        namespace = main.__dict__
        if kind == "call":
            # LeetCode-style solutions annotate with List, Optional, ... without importing them.
            typing = sys.modules["typing"]
            for attribute in typing.__all__:
                namespace[attribute] = getattr(typing, attribute)
        if not kernel.install_filter():
            raise OSError("seccomp")
        _write_all(fd_started, b"S")
        os.closerange(first_free, RESULT_FD_TARGET + 2)
    except BaseException:
        os._exit(SETUP_FAILED_STATUS)
    status = 0
    try:
        try:
            exec(code, namespace)
        finally:
            # CPython flushes stdout and stderr as soon as the main module ends (before
            # threads are joined and atexit runs): output printed before an atexit
            # `os._exit` is kept.
            _flush_std()
        if kind == "call":
            target = namespace.get(name)
            if target is None and isinstance(namespace.get("Solution"), type):
                target = getattr(namespace["Solution"](), name, None)
            if not callable(target):
                raise NameError("the program defines no function %r" % (name,))
            value = target(*args)
            try:
                payload = sys.modules["json"].dumps(value).encode("utf-8")
            except (TypeError, ValueError, RecursionError):
                payload = b"\x00unserializable"
            _write_all(VALUE_FD, payload)
        elif kind == "eval":
            values = [eval(expression, namespace) for expression in expressions]
            try:
                payload = sys.modules["json"].dumps([_encode(value) for value in values]).encode("utf-8")
            except (TypeError, ValueError, RecursionError):
                payload = b"\x00unserializable"
            _write_all(VALUE_FD, payload)
    except SystemExit as stop:
        status = _exit_status(stop)
    except BaseException as error:
        _report(error, main_path)
        status = 1
    _shutdown(status)


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


def _wipe(directory, mode):
    """Empty `directory` (`empty_directory`, from `_tree.py`, which precedes this file in
    the driver's source), and give it back its `mode`, fixed times and no extended
    attributes; True if it is as it was."""
    clean = empty_directory(directory)  # noqa: F821  (defined by _tree.py, see above)
    try:
        os.chmod(directory, mode)
        # A program may set the times of /tmp itself: they would carry a message.
        os.utime(directory, (0, 0))
        for attribute in os.listxattr(directory):
            os.removexattr(directory, attribute)
        return clean and not os.listxattr(directory)
    except OSError:
        return False


# Kernel objects that outlive processes in the sandbox's namespaces, as /proc lists them,
# with the number of lines the list has when it is empty.
LEFTOVER_LISTS = (("/proc/sysvipc/shm", 1), ("/proc/sysvipc/sem", 1), ("/proc/sysvipc/msg", 1))
# Per network namespace socket counts (cheap: /proc/net/tcp walks the host's whole table,
# ~9 ms); other fields of these files ("alloc", "mem") are the host's.
SOCKET_COUNTS = ("/proc/net/sockstat", "/proc/net/sockstat6")


def _count_lines(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().count(b"\n")
    except OSError:
        return 0


def _sockets_left():
    """True if the sandbox's network namespace still has sockets (in use, or a TCP
    connection in TIME_WAIT, which lasts a minute)."""
    for path in SOCKET_COUNTS:
        try:
            with open(path, "rb") as handle:
                fields = handle.read().split()
        except OSError:
            continue
        for name, value in zip(fields, fields[1:]):
            if name in (b"inuse", b"tw") and value != b"0":
                return True
    return False


def _leftovers():
    """True if the program left kernel objects that outlive processes in this sandbox's
    namespaces: System V IPC objects or sockets. Then the sandbox retires rather than serve
    another program. (The seccomp filter refuses System V IPC and keys, and POSIX message
    queues cannot be made: RLIMIT_MSGQUEUE is 0; the IPC check is the second line.)"""
    for path, empty_lines in LEFTOVER_LISTS:
        if _count_lines(path) > empty_lines:
            return True
    return _sockets_left()


# Namespace-wide state a program can move without leaving a file, process or socket, and the
# next program in this sandbox could read (issue 35, class 2): the network namespace's
# counters (loopback bytes and packets, every protocol's counters) and the session's
# autogroup (its nice value). Compared before and after each job: moved, the sandbox retires.
NAMESPACE_STATE = ("/proc/net/dev", "/proc/net/snmp", "/proc/net/snmp6", "/proc/net/netstat", "/proc/self/autogroup")
FS_IOC_GETFLAGS = 0x80086601


def _namespace_state(work_dir):
    """The bytes of NAMESPACE_STATE and the inode flags of `work_dir` (nodump, noatime, ...:
    a program may set them on /tmp itself, and emptying /tmp keeps them)."""
    import fcntl

    state = []
    for path in NAMESPACE_STATE:
        try:
            with open(path, "rb") as handle:
                state.append(handle.read())
        except OSError:
            state.append(None)
    try:
        fd = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            state.append(fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8))
        finally:
            os.close(fd)
    except OSError:
        state.append(None)
    return state


def _last_pid():
    """The PID most recently handed out in this PID namespace (the last field of
    /proc/loadavg, which the kernel reads from the reader's own PID namespace)."""
    with open("/proc/loadavg", "rb") as handle:
        return int(handle.read().split()[-1])


def _pid_max():
    """The largest PID the counter hands out before it wraps (the host's before Linux 6.14,
    the PID namespace's own after)."""
    try:
        with open("/proc/sys/kernel/pid_max", "rb") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 1 << 22  # the kernel's ceiling (PID_MAX_LIMIT on 64-bit)


def _settle_pid_counter(start, cases):
    """Leave the PID counter where `cases` case processes alone would have left it, so the
    next program in this sandbox cannot learn from its own PIDs what an earlier one did.

    Each case forks exactly one process; a case the driver skipped (compile error, stop after
    a timeout) is made up with a process that exits at once. A program that made processes or
    threads of its own moved the counter past that: the sandbox then retires (False). So does
    a counter that wrapped (it went below `start`, or `start + cases` lies past pid_max): the
    target cannot be reached by forking, and the loop would otherwise never end.
    """
    target = start + cases
    if target >= _pid_max():
        return False
    last = _last_pid()
    while last < target:
        if last < start:
            return False  # wrapped
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        now = _last_pid()
        if now <= last:
            return False  # wrapped (or the counter stood still)
        last = now
    return last == target


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


def _probe_inode(directory, kernel=None):
    """(inode number, directory offset) that a new file in `directory` gets now (the file is
    removed again); None when it cannot be made. tmpfs numbers inodes from one counter per
    mount, and since Linux 6.6 gives each new directory entry (a file, a hard link, a rename's
    new name) the next offset of a counter per directory: the two tell how many files and
    entries were made in the sandbox's /tmp since an earlier probe. The offset is None where
    it cannot be read (no `kernel`, or no getdents64 number for this machine)."""
    path = directory + "/.inode-probe"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_ino, (_entry_offset(kernel, directory, b".inode-probe") if kernel else None)
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass


def _entry_offset(kernel, directory, name):
    """The directory offset of entry `name` in `directory`: getdents64 reports each entry with
    the offset of the entry after it (d_off), so the entry before `name` carries it. None when
    it cannot be read."""
    number = SYS_GETDENTS64.get(os.uname().machine)
    if number is None:
        return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        buffer = kernel._buffer(bytes(8192))
        previous = None
        while True:
            count = kernel.syscall(number, fd, kernel._addressof(buffer), 8192, 0)
            if count <= 0:
                return None
            data = bytes(memoryview(buffer))[:count]
            at = 0
            while at < count:  # struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name
                offset = int.from_bytes(data[at + 8 : at + 16], "little", signed=True)
                length = int.from_bytes(data[at + 16 : at + 18], "little")
                if length <= 0:
                    return None
                if data[at + 19 : at + length].split(b"\0", 1)[0] == name:
                    return previous
                previous = offset
                at += length
    except Exception:
        return None
    finally:
        os.close(fd)


def _own_cpu(resource):
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run_job(header, payload_fd, result_fd, protected, kernel, resource, mode):
    """Run every case of one program and report it (READY, CASE frames, DONE); True if the
    sandbox is clean for the next program.

    Runs in the job process: forked from PID 1 for this program alone, a subreaper (the
    program's orphans come back to it, not to PID 1), gone after the job. Everything done
    because of what the program did (reaping its processes, emptying /tmp) is done here, so
    none of it shows in PID 1's counters, which every later program can read in /proc/1.
    """
    _write_all(result_fd, b"READY %d\n" % (1 if protected else 0))
    cap = header["max_output_bytes"]
    # What the harness receives over the whole run is bounded too: a program printing the
    # per-case cap on every one of many cases would otherwise fill the harness's memory.
    budget = header["max_run_output_bytes"]
    pid_namespace = header["pid_namespace"] and os.getppid() == 1
    work_dir = header["main_path"].rpartition("/")[0] or "/"
    # The filter (prepared by PID 1) refuses signals to this process: its placeholder
    # becomes this PID.
    kernel.guard(header["guard_sites"], os.getpid())
    if pid_namespace:
        # A process group of its own, so that -PID names only it. (Unisolated, it stays in
        # the driver's group, which the harness kills when it gives up on the run.)
        os.setpgid(0, 0)
    compile_error = -1  # the stderr memfd of the case that found the program does not compile
    stopped = False
    # The job process was the last PID handed out, and its probe the last inode made in /tmp.
    first_pid = os.getpid() if pid_namespace else 0
    first_probe = _probe_inode(work_dir, kernel) if pid_namespace else None
    first_state = _namespace_state(work_dir) if pid_namespace else None
    forked = 0
    for index, kind in enumerate(header["kinds"]):
        if stopped:
            _write_all(result_fd, b"CASE %d skipped 0 0 0 0 0 0 0 0 0 0\n" % index)
            continue
        if compile_error >= 0:
            total, kept = _kept(compile_error, min(cap, budget))
            _write_all(result_fd, b"CASE %d compile 1 0 0 0 %d 0 %d 0 0 0\n" % (index, total, kept))
            _send(result_fd, compile_error, kept)
            budget -= kept
            continue
        fds = (
            _memfd("stdout"),
            _memfd("stderr"),
            _memfd("value") if kind in ("call", "eval") else -1,
            _memfd("started"),
        )
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(header, index, payload_fd, fds, kernel)
        forked += 1
        status, _, timed_out = _wait(pid, header["wall_seconds"])
        strays = _sweep(pid, pid_namespace)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Every process of the case counts, not only the main one: the sweep reaped them all.
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        ran = os.fstat(fds[3]).st_size > 0
        # Each case starts from an empty /tmp, as a fresh run would: files the previous case
        # wrote would let a program carry state from one test to the next. Emptying it costs
        # what the program made (150k files take a second): that time is the case's.
        cleanup = _own_cpu(resource)
        _wipe(work_dir, mode)
        cpu += _own_cpu(resource) - cleanup
        wall = time.monotonic() - started
        if timed_out or (ran and wall > header["wall_seconds"]):
            term, number = b"wall", 0
            stopped = header["stop_on_timeout"]
        elif not ran:
            exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
            term, number = (b"compile", 1) if exit_code == COMPILE_FAILED_STATUS else (b"setup", exit_code)
        elif cpu > header["cpu_seconds"] or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == 24):
            # SIGXCPU at the soft CPU limit of one process, or all of them together past it.
            term, number = b"cpu", (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
            stopped = header["stop_on_timeout"]
        elif os.WIFSIGNALED(status):
            term, number = b"signal", os.WTERMSIG(status)
        else:
            term, number = b"exit", os.WEXITSTATUS(status)
        out_total, out = _kept(fds[0], min(cap, budget))
        budget -= out
        err_total, err = _kept(fds[1], min(cap, STDERR_KEPT, budget))
        budget -= err
        value_total = value = 0
        if fds[2] >= 0:
            value_total, value = _kept(fds[2], min(cap, budget))
            budget -= value
        header_line = b"CASE %d %s %d %.6f %.6f %d %d %d %d %d %d %d\n" % (
            index, term, number, cpu, wall, out_total, err_total, value_total, out, err, value, int(strays)
        )
        _write_all(result_fd, header_line)
        _send(result_fd, fds[0], out)
        _send(result_fd, fds[1], err)
        if fds[2] >= 0:
            _send(result_fd, fds[2], value)
        if term == b"compile":
            compile_error = fds[1]
        for fd in fds:
            if fd >= 0 and fd != compile_error:
                os.close(fd)
    if compile_error >= 0:
        os.close(compile_error)
    # Whatever the program wrote stays out of the next program's way; a sandbox that
    # cannot be cleaned, holds kernel objects, or whose numbering of PIDs or inodes the
    # program moved, retires ("DONE 1").
    clean = _wipe(work_dir, mode) and not (pid_namespace and _leftovers())
    if pid_namespace and clean:
        # Each case's process wrote one main.py, and a case not run (compile error, stop after
        # a timeout) is made up with one probe, so tmpfs's inode counter and /tmp's entry
        # offsets moved by one per case (plus the probes). A program that made any other file,
        # hard link or rename in /tmp moved one of them further, and the next program would
        # read that in its own files' numbers: the sandbox retires. (Before Linux 6.6 tmpfs
        # offsets are positions in the listing and do not move: nothing to compare.)
        for _ in range(len(header["kinds"]) - forked):
            _probe_inode(work_dir, kernel)
        last_probe = _probe_inode(work_dir, kernel)
        steps = len(header["kinds"]) + 1
        clean = (first_probe is not None and last_probe is not None and last_probe[0] == first_probe[0] + steps
                 and (last_probe[1] == first_probe[1] or (first_probe[1] is not None
                                                          and last_probe[1] == first_probe[1] + steps)))
    if pid_namespace and clean:
        clean = _namespace_state(work_dir) == first_state
    if pid_namespace and clean:
        clean = _settle_pid_counter(first_pid, len(header["kinds"]))
    _write_all(result_fd, b"DONE %d\n" % (0 if clean else 1))
    return clean


def main():
    result_fd = os.dup2(1, RESULT_FD_TARGET, inheritable=False)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 1)
    jobs_fd = os.dup2(0, RESULT_FD_TARGET + 1, inheritable=False)
    os.dup2(null, 0)
    os.close(null)
    import _signal

    # As PID 1 the driver gets only the signals it handles; Python handles SIGINT.
    _signal.signal(SIGINT, _signal.SIG_IGN)
    # Job processes are reaped by the kernel: a reaped child's CPU time and page faults
    # would otherwise add up in PID 1's /proc/1/stat, where the next program reads them.
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
    kernel = _Kernel()
    protected = kernel.make_undumpable()
    kernel.new_session_keyring()

    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mode = None
    payloads = _Payload()
    # Jobs arrive one after another, each a header and a payload, both an 8-byte big-endian
    # length and the bytes; the harness closes stdin when it has no more.
    while True:
        size = _read_exact(jobs_fd, 8)
        blob = None if size is None else _read_exact(jobs_fd, int.from_bytes(size, "big"))
        size = None if blob is None else _read_exact(jobs_fd, 8)
        if size is None:
            return
        payload_fd = payloads.receive(jobs_fd, int.from_bytes(size, "big"))
        if payload_fd is None:
            return
        header = marshal.loads(blob)
        # Modules the job's processes need are loaded here, once for the sandbox's life
        # (the job process would load them again for every program), and inherited.
        import select  # noqa: F401  (_wait)

        if "call" in header["kinds"] or "eval" in header["kinds"]:
            import json  # noqa: F401
        if "call" in header["kinds"]:
            import typing  # noqa: F401
        kernel.prepare_filter(header["seccomp"])
        if mode is None:
            mode = os.stat(header["main_path"].rpartition("/")[0] or "/").st_mode & 0o7777
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
                kernel.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
                _run_job(header, payload_fd, result_fd, protected, kernel, resource, mode)
                status = 0
            finally:
                os._exit(status)
        try:
            os.waitpid(pid, 0)  # returns (ECHILD) once the kernel reaped it
        except ChildProcessError:
            pass
        os.close(payload_fd)
        # A retiring job said so in its DONE line: the harness ends this sandbox.


main()
