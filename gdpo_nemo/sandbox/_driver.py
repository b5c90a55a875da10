"""The driver, last part: the per-case child's setup, the job process, and PID 1's loop.

Follows `_driver_kernel.py` (whose docstring states the protocol and the order of the
driver's files) and `_driver_program.py` in the driver's source, and uses their names;
never imported by the harness. Its last line starts the driver.
"""

import marshal
import posix as os  # the builtin half of `os`: importing `os` itself costs ~2 ms
import sys
import time

FD_LIMIT = 256  # RLIMIT_NOFILE of the program; competitive programs need a handful
STDERR_KEPT = 64 << 10  # stderr only serves diagnostics: its tail is rarely longer
SIGPENDING_LIMIT = 64  # queued signals and POSIX timers of the program, all its processes together


def _job_in_pid_1(header):
    """True when PID 1 runs this job itself: the sandbox ends with it (a one-off run) and
    has its own PID namespace, so its counters serve no later program; that saves the fork
    of a job process (~2 ms of a fresh sandbox's ~40 ms of CPU)."""
    return header["last"] and header["pid_namespace"]


def _enter_case(header, index, payload_fd, fds):
    """Prepare the forked child for case `index`: read its part of the payload, write the
    source to `main.py`, put its stdin memfd and the output memfds `fds` (stdout, stderr,
    value or -1, started) on fds 0-3, set its rlimits. Returns (source, kind, name, args,
    expressions, main_path, the first fd the program need not keep)."""
    import _signal

    import resource

    fd_out, fd_err, fd_val, _ = fds
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
        # Counted per user namespace and uid, so the driver and the job process count too
        # (one process, PID 1, where it runs the sandbox's last job itself).
        nproc = header["max_processes"] + (1 if _job_in_pid_1(header) else 2)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return source, kind, name, args, expressions, main_path, first_free


def _child(header, index, payload_fd, fds, kernel):
    """Runs in the forked child: reads its case from the payload, becomes the program.
    Never returns."""
    try:
        source, kind, name, args, expressions, main_path, first_free = _enter_case(header, index, payload_fd, fds)
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
        namespace = _main_namespace(main_path, kind)
        if not kernel.install_filter():
            raise OSError("seccomp")
        _write_all(fds[3], b"S")
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
    """The PID most recently handed out in this PID namespace (/proc/sys/kernel/ns_last_pid,
    the reader's own namespace's; /proc/loadavg's last field says the same, but the sandbox
    hides loadavg, a host-wide counter of threads running)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as handle:
            return int(handle.read())
    except (OSError, ValueError):
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
            count = kernel.syscall(number, fd, kernel._addressof(buffer), 8192, 0, 0)
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
    The last job of a sandbox with its own PID namespace (header "last": a one-off run) runs
    in PID 1 itself: no program comes after it to read those counters.
    """
    _write_all(result_fd, b"READY %d\n" % (1 if protected else 0))
    cap = header["max_output_bytes"]
    # What the harness receives over the whole run is bounded too: a program printing the
    # per-case cap on every one of many cases would otherwise fill the harness's memory.
    budget = header["max_run_output_bytes"]
    in_pid_1 = os.getpid() == 1  # the last job of a sandbox with its own PID namespace
    pid_namespace = header["pid_namespace"] and (in_pid_1 or os.getppid() == 1)
    work_dir = header["main_path"].rpartition("/")[0] or "/"
    # The filter (prepared by PID 1) refuses signals to this process: its placeholder
    # becomes this PID.
    kernel.guard(header["guard_sites"], os.getpid())
    if pid_namespace and not in_pid_1:  # PID 1 leads its session, and so its group, already
        # A process group of its own, so that -PID names only it. (Unisolated, it stays in
        # the driver's group, which the harness kills when it gives up on the run.)
        os.setpgid(0, 0)
    compile_error = -1  # the stderr memfd of the case that found the program does not compile
    stopped = False
    # The job process was the last PID handed out, and its probe the last inode made in /tmp.
    # A sandbox that ends after this job (`last`) serves no next program: nothing to mark.
    keep = pid_namespace and not header["last"]
    marks = (os.getpid(), _probe_inode(work_dir, kernel), _namespace_state(work_dir)) if keep else None
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
        outcome = _end_case(pid, started, before, fds[3], header, pid_namespace, work_dir, mode, resource)
        if outcome[0] in (b"wall", b"cpu"):
            stopped = header["stop_on_timeout"]
        budget = _write_case(result_fd, index, outcome, fds, cap, budget)
        if outcome[0] == b"compile":
            compile_error = fds[1]
        for fd in fds:
            if fd >= 0 and fd != compile_error:
                os.close(fd)
    if compile_error >= 0:
        os.close(compile_error)
    # The last job's sandbox retires ("DONE 1") unchecked: it ends now, /tmp and all.
    clean = not header["last"] and _clean_for_next(header, work_dir, mode, kernel, forked, marks)
    _write_all(result_fd, b"DONE %d\n" % (0 if clean else 1))
    return clean


def _end_case(pid, started, before, started_fd, header, pid_namespace, work_dir, mode, resource):
    """Wait for case process `pid` (forked at monotonic time `started`, when the job's
    children had used `before`, a struct rusage), kill what it left running and empty /tmp:
    (term, number, cpu seconds, wall seconds, strays) for its CASE line. `started_fd`: the
    memfd the child writes to once the program starts."""
    status, _, timed_out = _wait(pid, header["wall_seconds"])
    strays = _sweep(pid, pid_namespace)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Every process of the case counts, not only the main one: the sweep reaped them all.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ran = os.fstat(started_fd).st_size > 0
    # Each case starts from an empty /tmp, as a fresh run would: files the previous case
    # wrote would let a program carry state from one test to the next. Emptying it costs
    # what the program made (150k files take a second): that time is the case's.
    cleanup = _own_cpu(resource)
    _wipe(work_dir, mode)
    cpu += _own_cpu(resource) - cleanup
    wall = time.monotonic() - started
    term, number = _term(status, timed_out, ran, cpu, wall, header)
    return term, number, cpu, wall, strays


def _term(status, timed_out, ran, cpu, wall, header):
    """(term, number) of a case's CASE line (`_driver_kernel.py`'s docstring lists them)
    from its wait status, whether it was killed at the wall-clock limit, whether the
    program started, and its CPU and wall seconds."""
    if timed_out or (ran and wall > header["wall_seconds"]):
        return b"wall", 0
    if not ran:
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        return (b"compile", 1) if exit_code == COMPILE_FAILED_STATUS else (b"setup", exit_code)
    if cpu > header["cpu_seconds"] or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == 24):
        # SIGXCPU at the soft CPU limit of one process, or all of them together past it.
        return b"cpu", (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status):
        return b"signal", os.WTERMSIG(status)
    return b"exit", os.WEXITSTATUS(status)


def _write_case(result_fd, index, outcome, fds, cap, budget):
    """Report case `index` (`outcome` from `_end_case`): its CASE line, then what is kept of
    its stdout, stderr and value memfds `fds` (each at most `cap` bytes, stderr at most
    STDERR_KEPT, all of them at most the run's `budget`); the budget left."""
    term, number, cpu, wall, strays = outcome
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
    return budget


def _clean_for_next(header, work_dir, mode, kernel, forked, marks):
    """Empty /tmp after the job; True if the sandbox may serve the next program. `forked`:
    how many case processes the job forked. `marks`: (the job process's PID, its
    `_probe_inode` and `_namespace_state`) from the job's start when the driver is PID 1 of
    the sandbox's own PID namespace, else None (then only /tmp is checked)."""
    # Whatever the program wrote stays out of the next program's way; a sandbox that
    # cannot be cleaned, holds kernel objects, or whose numbering of PIDs or inodes the
    # program moved, retires ("DONE 1").
    clean = _wipe(work_dir, mode) and not (marks is not None and _leftovers())
    if marks is None or not clean:
        return clean
    first_pid, first_probe, first_state = marks
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
    if clean:
        clean = _namespace_state(work_dir) == first_state
    if clean:
        clean = _settle_pid_counter(first_pid, len(header["kinds"]))
    return clean


def main():
    result_fd = os.dup2(1, RESULT_FD_TARGET, inheritable=False)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 1)
    jobs_fd = os.dup2(0, RESULT_FD_TARGET + 1, inheritable=False)
    os.dup2(null, 0)
    os.close(null)
    kernel = _Kernel()
    if sys.argv[-1] == PROC_SUBSET_ARG:
        failed = kernel.mount_proc_subset()
        if failed is not None:  # nothing ran yet: the harness reports the sandbox's failure, with this
            _write_all(2, ("gdpo-sandbox driver: %s\n" % failed).encode("utf-8", "replace"))
            os._exit(SETUP_FAILED_STATUS)
    import _signal

    # As PID 1 the driver gets only the signals it handles; Python handles SIGINT.
    _signal.signal(SIGINT, _signal.SIG_IGN)
    # Job processes are reaped by the kernel: a reaped child's CPU time and page faults
    # would otherwise add up in PID 1's /proc/1/stat, where the next program reads them.
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
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
        if _job_in_pid_1(header):
            _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
            _run_job(header, payload_fd, result_fd, protected, kernel, resource, mode)
            return
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
