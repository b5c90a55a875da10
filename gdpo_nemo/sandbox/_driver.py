"""The driver that runs inside the sandbox: programs one after another, each on all its test cases.

This file is never imported by the harness. `gdpo_nemo.sandbox.isolation` compiles its text
with the sandbox's interpreter and starts it (a small bootstrap reads the code object from
stdin, see `isolation._BOOTSTRAP`) inside bubblewrap (as PID 1 of the sandbox's
PID namespace) or, in the fallback, as a plain child in a new session. It must run on any
CPython >= 3.8 with the standard library only, and it imports as little as it can: its
start-up time is most of a sandboxed run's cost.

Protocol (all on the driver's own file descriptors; the program under test never holds them):
- stdin: jobs, one after another, each an 8-byte big-endian length and a `marshal` blob
  (version 4, plain types only) written by the harness:
  {"source": str, "main_path": str, "cases": [(kind, stdin_bytes, name, args, check)],
   "cpu_seconds": int, "wall_seconds": float, "memory_bytes": int, "max_processes": int | None,
   "max_file_bytes": int, "max_output_bytes": int, "max_run_output_bytes": int,
   "pid_namespace": bool, "stop_on_timeout": bool}
  kind is "stdio" (feed stdin, keep stdout), "call" (run the program, then call `name(*args)`
  and record the JSON of the return value) or "check" (run the program, then execute the
  statement `check`: an AssertionError records "F", completion records "P"). End of input
  ends the driver.
- stdout, per job: b"READY <protected 0|1>\n", then per case one header line
  b"CASE <index> <term> <number> <cpu_s> <wall_s> <out_total> <err_total> <len_out> <len_err> <len_val> <strays>\n"
  followed by the kept stdout, stderr and value bytes; finally b"DONE <retiring 0|1>\n".
  term: "exit" (number = exit code), "signal" (number = signal), "wall" (killed at the
  wall-clock limit), "compile" (the program did not compile; stderr says why), "skipped"
  (not run: an earlier case timed out and the job asked to stop there). Retiring: the
  driver exits after this job because the program left something it cannot clean.

Why the program cannot forge these frames: the driver makes itself non-dumpable
(prctl PR_SET_DUMPABLE 0), so a process of the same uid can neither ptrace it nor open
its /proc/<pid>/fd or /proc/<pid>/mem; the child closes the result descriptor before the
program runs; and as PID 1 of its namespace the driver ignores signals its descendants send.
"""

import marshal
import posix as os  # the builtin half of `os`: importing `os` itself costs ~2 ms
import sys
import time

RESULT_FD_TARGET = 100  # keeps the result pipe away from the fds a program expects (0-3)
VALUE_FD = 3  # where "call"/"check" cases write their value
FD_LIMIT = 256  # RLIMIT_NOFILE of the program; competitive programs need a handful
STDERR_KEPT = 64 << 10  # stderr only serves diagnostics: its tail is rarely longer
PR_SET_DUMPABLE = 4
SIGKILL = 9
FLUSH_FAILED_STATUS = 120  # what CPython exits with when flushing stdout fails at exit
SETUP_FAILED_STATUS = 121  # the driver could not prepare the case (reported as an error)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _make_undumpable():
    """prctl(PR_SET_DUMPABLE, 0); True when it worked.

    `ctypes` costs ~5 ms to import, a third of a sandboxed run, so the call is built from
    the `_ctypes` extension alone and falls back to `ctypes` if that private path changes.
    """
    try:
        import _ctypes

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Func(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        class _Libc:
            _handle = _ctypes.dlopen(None, os.RTLD_NOW)

        prctl = _Func(("prctl", _Libc()))
        prctl.argtypes = (_Int, _Int, _Int, _Int, _Int)
        return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:
        pass
    try:
        import ctypes

        return ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:
        return False


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


def _memfd(name, data=b""):
    fd = os.memfd_create(name, 0)
    if data:
        _write_all(fd, data)
        os.lseek(fd, 0, 0)
    return fd


def _read_kept(fd, cap):
    """(total size, first `cap` bytes) of a memfd."""
    total = os.fstat(fd).st_size
    want = min(total, cap)
    parts = []
    offset = 0
    while offset < want:
        chunk = os.pread(fd, want - offset, offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return total, b"".join(parts)


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
    outside. Without that namespace (the fallback) only the program's process group can be
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


def _child(job, case, code, fds):
    """Runs in the forked child: becomes the program. Never returns."""
    try:
        import builtins
        import io

        import resource

        kind, _, name, args, check = case
        fd_in, fd_out, fd_err, fd_val = fds
        os.setpgid(0, 0)
        os.dup2(fd_in, 0)
        os.dup2(fd_out, 1)
        os.dup2(fd_err, 2)
        first_free = 3
        if fd_val >= 0:
            os.dup2(fd_val, VALUE_FD)
            first_free = VALUE_FD + 1
        os.closerange(first_free, RESULT_FD_TARGET + 2)
        cpu = job["cpu_seconds"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (job["max_file_bytes"], job["max_file_bytes"]))
        resource.setrlimit(resource.RLIMIT_AS, (job["memory_bytes"], job["memory_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
        # No POSIX message queues: they would outlive the program in a reused sandbox.
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
        if job["max_processes"] is not None:
            # Counted per user namespace and uid, so the driver counts too: +1.
            nproc = job["max_processes"] + 1
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        sys.stdin = sys.__stdin__ = io.open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = sys.__stdout__ = io.open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = sys.__stderr__ = io.open(
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        )
        sys.argv = [job["main_path"]]
        main = type(sys)("__main__")
        main.__file__ = job["main_path"]
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        namespace = main.__dict__
        if kind == "call":
            # LeetCode-style solutions annotate with List, Optional, ... without importing them.
            typing = sys.modules["typing"]
            for attribute in typing.__all__:
                namespace[attribute] = getattr(typing, attribute)
    except BaseException:
        os._exit(SETUP_FAILED_STATUS)
    status = 0
    try:
        exec(code, namespace)
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
        elif kind == "check":
            try:
                exec(check, namespace)
            except AssertionError:
                _write_all(VALUE_FD, b"F")
            else:
                _write_all(VALUE_FD, b"P")
    except SystemExit as stop:
        status = _exit_status(stop)
    except BaseException as error:
        _report(error, job["main_path"])
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


def _wipe(directory, keep=None):
    """Remove everything inside `directory` but the entry named `keep`, without following
    symlinks; True if nothing else is left. Iterative: a program may nest directories
    deeper than Python recursion."""
    stack = [(directory, False)]
    while stack:
        path, listed = stack.pop()
        if listed:
            try:
                os.rmdir(path)
            except OSError:
                pass
            continue
        try:
            os.chmod(path, 0o700)  # a program may have taken away its own permissions
            entries = list(os.scandir(path))
        except OSError:
            continue
        if path != directory:
            stack.append((path, True))
        for entry in entries:
            if path == directory and entry.name == keep:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, False))
                else:
                    os.unlink(entry.path)
            except OSError:
                pass
    try:
        return [name for name in os.listdir(directory) if name != keep] == []
    except OSError:
        return False


def _leftovers():
    """True if the program left kernel objects that outlive processes in this sandbox's
    namespaces: System V IPC objects or keys. Then the sandbox retires rather than serve
    another program. (POSIX message queues cannot be made: RLIMIT_MSGQUEUE is 0.)"""
    for name, empty_lines in (("sysvipc/shm", 1), ("sysvipc/sem", 1), ("sysvipc/msg", 1), ("keys", 0)):
        try:
            with open("/proc/" + name, "rb") as handle:
                if handle.read().count(b"\n") > empty_lines:
                    return True
        except OSError:
            pass
    return False


def _run_job(job, result_fd, protected, resource):
    """Run every case of one program and report it (READY, CASE frames, DONE)."""
    # The driver compiles the program: bound its memory too (soft limit, so that a later
    # job may ask for more).
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    soft = job["memory_bytes"] if hard == resource.RLIM_INFINITY else min(job["memory_bytes"], hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    _write_all(result_fd, b"READY %d\n" % (1 if protected else 0))
    cap = job["max_output_bytes"]
    # What the harness receives over the whole run is bounded too: a program printing the
    # per-case cap on every one of many cases would otherwise fill the harness's memory.
    budget = job["max_run_output_bytes"]
    pid_namespace = job["pid_namespace"] and os.getpid() == 1
    # The source file only serves tracebacks (linecache) and __file__; raw posix calls
    # because a text-mode open() costs ~1 ms here.
    work_dir, _, main_name = job["main_path"].rpartition("/")
    work_dir = work_dir or "/"
    main_fd = os.open(job["main_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    _write_all(main_fd, job["source"].encode("utf-8", "surrogatepass"))
    os.close(main_fd)
    try:
        code = _compile(job["source"], job["main_path"])
        compile_error = None
    except BaseException as err:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError
        if isinstance(err, SyntaxError):
            err.filename = job["main_path"]
        code = None
        compile_error = ("%s: %s\n" % (type(err).__name__, err)).encode("utf-8", "backslashreplace")
    checks = {}
    for index, case in enumerate(job["cases"]):
        if code is not None and case[0] == "check":
            checks[index] = _compile(case[4], "<check>")
    if code is not None and any(case[0] == "call" for case in job["cases"]):
        import json  # noqa: F401  (loaded once here, inherited by every forked child)
        import typing  # noqa: F401

    stopped = False
    for index, case in enumerate(job["cases"]):
        if stopped:
            _write_all(result_fd, b"CASE %d skipped 0 0 0 0 0 0 0 0 0\n" % index)
            continue
        if code is None:
            err = compile_error[:cap]
            header = b"CASE %d compile 1 0 0 0 %d 0 %d 0 0\n" % (index, len(compile_error), len(err))
            _write_all(result_fd, header + err)
            continue
        kind = case[0]
        fds = (
            _memfd("stdin", case[1]),
            _memfd("stdout"),
            _memfd("stderr"),
            _memfd("value") if kind in ("call", "check") else -1,
        )
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            run = case if kind != "check" else (kind, case[1], case[2], case[3], checks[index])
            _child(job, run, code, fds)
        status, cpu, timed_out = _wait(pid, job["wall_seconds"])
        wall = time.monotonic() - started
        strays = _sweep(pid, pid_namespace)
        # Each case starts from the same /tmp, as a fresh run would: files the previous case
        # wrote would let a program carry state from one test to the next.
        _wipe(work_dir, keep=main_name)
        if timed_out:
            term, number = b"wall", 0
            stopped = job["stop_on_timeout"]
        elif os.WIFSIGNALED(status):
            term, number = b"signal", os.WTERMSIG(status)
            # SIGXCPU at the soft CPU limit, SIGKILL at the hard one.
            if number == 24 or (number == SIGKILL and cpu >= job["cpu_seconds"]):
                stopped = job["stop_on_timeout"]
        else:
            term, number = b"exit", os.WEXITSTATUS(status)
        out_total, out = _read_kept(fds[1], min(cap, budget))
        budget -= len(out)
        err_total, err = _read_kept(fds[2], min(cap, STDERR_KEPT, budget))
        budget -= len(err)
        value = b""
        if fds[3] >= 0:
            value = _read_kept(fds[3], min(cap, budget))[1]
            budget -= len(value)
        for fd in fds:
            if fd >= 0:
                os.close(fd)
        header = b"CASE %d %s %d %.6f %.6f %d %d %d %d %d %d\n" % (
            index, term, number, cpu, wall, out_total, err_total, len(out), len(err), len(value), int(strays)
        )
        _write_all(result_fd, header + out + err + value)
    # Whatever the program wrote stays out of the next program's way; a sandbox that
    # cannot be cleaned, or holds kernel objects, retires ("DONE 1").
    clean = _wipe(work_dir) and not (pid_namespace and _leftovers())
    _write_all(result_fd, b"DONE %d\n" % (0 if clean else 1))
    return clean


def main():
    result_fd = os.dup2(1, RESULT_FD_TARGET, inheritable=False)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 1)
    jobs_fd = os.dup2(0, RESULT_FD_TARGET + 1, inheritable=False)
    os.dup2(null, 0)
    os.close(null)
    protected = _make_undumpable()

    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Jobs arrive one after another, each an 8-byte big-endian length and a marshal blob;
    # the harness closes stdin when it has no more.
    while True:
        header = _read_exact(jobs_fd, 8)
        if header is None:
            return
        blob = _read_exact(jobs_fd, int.from_bytes(header, "big"))
        if blob is None:
            return
        if not _run_job(marshal.loads(blob), result_fd, protected, resource):
            return


main()
