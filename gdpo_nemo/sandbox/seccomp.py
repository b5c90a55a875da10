"""The seccomp filter of sandboxed programs: the system calls a test program never needs.

A classic-BPF program (the format `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)` takes),
assembled here with no dependency. The driver installs it in each case's process after its
own setup (memfds, rlimits) and before the program's first instruction, so the program and
everything it starts run under it; the driver itself does not.

What it refuses (EPERM unless noted), and why a test program never needs it:
- io_uring (`io_uring_setup/enter/register`): a second system-call interface this filter
  could not see into.
- keyrings (`keyctl`, `add_key`, `request_key`): kernel keys outlive the program and are
  shared by every process of a uid.
- System V IPC (`shm*`, `sem*`, `msg*`): objects outlive the program in a reused sandbox, and
  shared memory is not counted by RLIMIT_AS.
- `memfd_create`, `memfd_secret`: anonymous files are not counted by RLIMIT_AS either.
- extended attributes (`setxattr`, `lsetxattr`, `fsetxattr`, `setxattrat`, `file_setattr`):
  tmpfs does not count them against its size, and they can carry messages between programs.
- other processes' memory (`ptrace`, `process_vm_readv/writev`, `pidfd_getfd`, `kcmp`).
- kernel facilities (`bpf`, `perf_event_open`, `userfaultfd`, `fanotify_init`,
  `lookup_dcookie`, module loading, `kexec_*`, `reboot`, `swapon/off`, `acct`, `quotactl*`,
  `iopl`, `ioperm`, `name_to_handle_at`, `open_by_handle_at`).
- mounts and namespaces (`mount`, `umount2`, `pivot_root`, `chroot`, the new mount API,
  `mount_setattr`, `unshare`, `setns`).
- setting file times (`utime`, `utimes`, `futimesat`, `utimensat`): the host's /dev/null is
  bound into the sandbox, and its times would carry messages between programs. (So
  `shutil.copy2`, which copies times, fails inside the sandbox; `shutil.copy` works.)
- another process's state (issue 23): `prlimit64`, `sched_setparam/getparam/setscheduler/
  getscheduler/setaffinity/getaffinity/setattr/getattr/rr_get_interval` unless aimed at the
  caller itself (pid 0); `setpriority/getpriority` unless `PRIO_PROCESS, 0`; `ioprio_set/get`
  unless `IOPRIO_WHO_PROCESS, 0`. The driver (PID 1) and its job process run as the
  program's uid, so these calls would otherwise change or read their limits, priorities and
  CPUs: one program could break every later program of a reused sandbox, or pass them a
  message. A test program only ever sets its own (`resource.setrlimit`, `os.nice`,
  `os.sched_setaffinity(0, ...)` all pass pid 0).
- signals to the job process (the driver's child that runs this program's cases; it holds
  the report channel and reaps the program's processes): `kill`, `tkill`, `tgkill`,
  `rt_sigqueueinfo`, `rt_tgsigqueueinfo`, `pidfd_open` aimed at its PID (or, for `kill`, its
  process group or -1, "every process"); `setpgid` into its process group (from where
  `kill(0)` would reach it); `fcntl(F_SETOWN)` naming it, `F_SETOWN_EX`, the `ioctl`s
  FIOSETOWN / SIOCSPGRP and `pidfd_send_signal` (whose targets the filter cannot read: a
  /proc/<pid> directory is a pidfd too). The filter is built
  with a placeholder (`GUARD_PLACEHOLDER`) that the job process replaces with its own PID
  (at `guard_sites`). A program may still signal its own processes; PID 1 ignores what it sends.
- locks, leases and watches on files (`flock`; `fcntl` with F_GETLK/F_SETLK/F_SETLKW, their
  F_OFD_ forms, F_SETLEASE/F_GETLEASE and F_NOTIFY; `inotify_init/init1/add_watch/rm_watch`):
  the read-only system files under /usr are the same inodes in every sandbox, so a lock or a
  watch on them would carry messages between concurrent programs.
- Linux native AIO (`io_setup`, `io_destroy`, `io_submit`, `io_cancel`, `io_getevents`,
  `io_pgetevents`): its contexts count against the host-wide `fs.aio-max-nr`, which neither
  an rlimit nor a cgroup bounds; a program could make the harness's own AIO fail.
- `clone3` (ENOSYS: its flags sit behind a pointer the filter cannot read; the C library
  then falls back to `clone`).
- shared futexes (issue 35): `futex` ops without FUTEX_PRIVATE_FLAG (a shared futex is keyed
  by inode and offset, so waiters parked on a read-only shared mapping of a file under /usr
  can be woken, and counted, from another sandbox), and the futex2 calls `futex_waitv`,
  `futex_wait`, `futex_wake`, `futex_requeue` (ENOSYS: their flags are behind pointers).
  Threads, locks and condition variables of one process use private futexes and work;
  process-shared semaphores (`multiprocessing` locks) do not.
- sockets of any family but AF_UNIX (EAFNOSUPPORT): no netlink, no packet sockets, and no
  TCP or UDP unless the Sandbox is made with `inet=True` (issue 35: TCP buffers escaped the
  sandbox's memory bound, and the host's ephemeral-port table and the namespace's protocol
  counters are shared state a program could move for another).
- changing how the pages of the files it reads are held (issue 46): `madvise` with MADV_COLD,
  MADV_PAGEOUT (towards swap), MADV_HUGEPAGE or MADV_COLLAPSE (into huge pages),
  `process_madvise`, and moving pages between NUMA nodes or asking where one lies (`mbind`,
  `migrate_pages`, `move_pages`, `get_mempolicy`). The files a program can read are a tmpfs
  copy (gdpo_nemo.sandbox.runtime) that the next sandbox to lease it reads after this one: its
  pages stay resident, small and where they are, so nothing a program did to them is left for
  a later one to find. (The kernel's own NUMA balancing may still move a page towards the node
  of a CPU that reads it often, on a host of several nodes; docs/sandbox.md.)
- `setsid` (issue 46): each new session takes the next number of the host-wide autogroup
  counter, which a program reads in /proc/self/autogroup after its own setsid (32 of 32 bits
  in 3.2 s between concurrent sandboxes). The sandbox is a session of its own already
  (bwrap's --new-session); a program can still make process groups of its own (`setpgid`).
- any other ABI than the native one (ENOSYS): i386 calls from x86_64 (`int 0x80`) and x32.

Supported machines: x86_64 and aarch64; elsewhere `filter_program` raises.
"""

from __future__ import annotations

import errno
import platform

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARGS = 0, 4, 16
# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45  # jump if (A & k) != 0
_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10

_COMMON = {  # numbers shared by every architecture (Linux >= 5.1 allocates them so)
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
    "pidfd_send_signal": 424, "mount_setattr": 442, "quotactl_fd": 443, "memfd_secret": 447, "setxattrat": 463, "open_tree_attr": 467,
    "file_setattr": 469, "futex_waitv": 449, "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456,
    "process_madvise": 440,
}
# futex(2) ops must carry FUTEX_PRIVATE_FLAG: a shared futex is keyed by the file's inode and
# offset, so waiters on a read-only shared mapping of a system file would be a channel
# between concurrent sandboxes (issue 35, class 1).
FUTEX_PRIVATE_FLAG = 128
_FUTEX = {"x86_64": 202, "aarch64": 98}
# madvise(2) advice that changes how the pages of a file are held (issue 46): the files programs
# read are a tmpfs copy (gdpo_nemo.sandbox.runtime) that later sandboxes read after this one,
# resident for good unless a page is pushed towards swap (MADV_COLD, MADV_PAGEOUT), and held in
# small pages unless collapsed into a huge one, for every reader (MADV_COLLAPSE; MADV_HUGEPAGE
# lets khugepaged do it where tmpfs allows huge pages).
MADV_HUGEPAGE, MADV_COLD, MADV_PAGEOUT, MADV_COLLAPSE = 14, 20, 21, 25
REFUSED_MADVISE = (MADV_HUGEPAGE, MADV_COLD, MADV_PAGEOUT, MADV_COLLAPSE)
_MADVISE = {"x86_64": 28, "aarch64": 233}
# The futex2 calls carry their flags behind pointers or per waiter: refused (ENOSYS; no C
# library needs them yet).
_FUTEX2 = ("futex_waitv", "futex_wake", "futex_wait", "futex_requeue")
# Calls allowed only in the forms that act on the caller itself (see the module docstring).
_CONDITIONAL_COMMON: dict[str, int] = {}
_CONDITIONAL_X86_64 = {
    "prlimit64": 302, "setpriority": 141, "getpriority": 140, "sched_setparam": 142, "sched_getparam": 143,
    "sched_setscheduler": 144, "sched_getscheduler": 145, "sched_rr_get_interval": 148, "sched_setaffinity": 203,
    "sched_getaffinity": 204, "sched_setattr": 314, "sched_getattr": 315, "ioprio_set": 251, "ioprio_get": 252,
    "fcntl": 72,
}
_CONDITIONAL_AARCH64 = {
    "prlimit64": 261, "setpriority": 140, "getpriority": 141, "sched_setparam": 118, "sched_getparam": 121,
    "sched_setscheduler": 119, "sched_getscheduler": 120, "sched_rr_get_interval": 127, "sched_setaffinity": 122,
    "sched_getaffinity": 123, "sched_setattr": 274, "sched_getattr": 275, "ioprio_set": 30, "ioprio_get": 31,
    "fcntl": 25,
}
# The rule of each conditional call: the (argument index, value) pairs that must all hold.
_SELF_ONLY = ((0, 0),)
RULES = {
    **{name: _SELF_ONLY for name in _CONDITIONAL_X86_64 if name.startswith(("prlimit", "sched_"))},
    "setpriority": ((0, 0), (1, 0)),  # PRIO_PROCESS, who = 0
    "getpriority": ((0, 0), (1, 0)),
    "ioprio_set": ((0, 1), (1, 0)),  # IOPRIO_WHO_PROCESS, who = 0
    "ioprio_get": ((0, 1), (1, 0)),
}
# Signals aimed at the job process (see the module docstring): the filter compares with this
# placeholder, which `guard` replaces with the job process's PID.
GUARD_PLACEHOLDER = 0x5A5A_A5A5
_SIGNALLING_COMMON = {"pidfd_open": 434}
_SIGNALLING_X86_64 = {"setpgid": 109, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "ioctl": 16}
_SIGNALLING_AARCH64 = {"setpgid": 154, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "ioctl": 29}
F_SETOWN, F_SETOWN_EX = 8, 15
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902
# fcntl commands refused: record locks (classic and open-file-description), leases, dnotify.
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 5, 6, 7, 36, 37, 38
F_SETLEASE, F_GETLEASE, F_NOTIFY = 1024, 1025, 1026
REFUSED_FCNTL = (F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_GETLEASE, F_NOTIFY)
_X86_64 = {
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "perf_event_open": 298, "userfaultfd": 323,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "memfd_create": 319,
    "socket": 41, "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "kexec_load": 246, "kexec_file_load": 320,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168,
    "acct": 163, "quotactl": 179, "name_to_handle_at": 303, "open_by_handle_at": 304, "kcmp": 312, "fanotify_init": 300,
    "lookup_dcookie": 212, "iopl": 172, "ioperm": 173, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
    "flock": 73, "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254, "inotify_rm_watch": 255,
    "io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209, "io_cancel": 210, "io_pgetevents": 333,
    "setsid": 112, "mbind": 237, "migrate_pages": 256, "move_pages": 279, "get_mempolicy": 239,
}
_AARCH64 = {  # the generic table (asm-generic/unistd.h); aarch64 has no iopl/ioperm
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "perf_event_open": 241, "userfaultfd": 282,
    "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "memfd_create": 279,
    "socket": 198, "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191,
    "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "kexec_load": 104,
    "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224,
    "swapoff": 225, "acct": 89, "quotactl": 60, "name_to_handle_at": 264, "open_by_handle_at": 265, "kcmp": 272,
    "fanotify_init": 262, "lookup_dcookie": 18, "utimensat": 88, "flock": 32, "inotify_init1": 26,
    "inotify_add_watch": 27, "inotify_rm_watch": 28, "io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3,
    "io_getevents": 4, "io_pgetevents": 292, "setsid": 157, "mbind": 235, "migrate_pages": 238, "move_pages": 239,
    "get_mempolicy": 236,
}
# machine -> (AUDIT_ARCH_* value, syscall table, whether the x32 bit must be refused)
MACHINES = {
    "x86_64": (0xC000003E, {**_X86_64, **_COMMON, **_CONDITIONAL_X86_64, **_SIGNALLING_X86_64, **_SIGNALLING_COMMON}, True),
    "aarch64": (0xC00000B7, {**_AARCH64, **_COMMON, **_CONDITIONAL_AARCH64, **_SIGNALLING_AARCH64, **_SIGNALLING_COMMON}, False),
}
REFUSED = tuple(name for name in _X86_64 if name != "socket") + tuple(n for n in _COMMON if n != "clone3" and n not in _FUTEX2)
CONDITIONAL = tuple(_CONDITIONAL_X86_64)


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return code.to_bytes(2, "little") + bytes((jt, jf)) + k.to_bytes(4, "little")


def filter_program(machine: str | None = None, *, inet: bool = False) -> bytes:
    """The filter as the bytes of a `struct sock_filter[]` for `machine` (default: this one's,
    `platform.machine()`); 8 bytes per instruction, little-endian. `inet`: allow AF_INET and
    AF_INET6 sockets too (default: AF_UNIX only).

    Raises RuntimeError naming the machine when it is not x86_64 or aarch64.
    """
    machine = machine or platform.machine()
    if machine not in MACHINES:
        raise RuntimeError(
            f"the sandbox's seccomp filter knows the system calls of {', '.join(MACHINES)}, not {machine!r}; "
            "add this machine's table to gdpo_nemo/sandbox/seccomp.py"
        )
    arch, table, refuse_x32 = MACHINES[machine]
    refused = sorted({table[name] for name in REFUSED if name in table})
    # Instructions are (code, jump-if-true, jump-if-false, k); a jump names a label, resolved
    # to a relative offset (at most 255 forward) once every block is placed.
    code = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 0, "ret_nosys", arch), (_LD_W_ABS, 0, 0, _NR)]
    if refuse_x32:
        code.append((_JGE_K, "ret_nosys", 0, _X32_BIT))
    code += [(_JEQ_K, "ret_perm", 0, number) for number in refused]
    code += [(_JEQ_K, "socket", 0, table["socket"]), (_JEQ_K, "ret_nosys", 0, table["clone3"])]
    code += [(_JEQ_K, "ret_nosys", 0, table[name]) for name in _FUTEX2]
    code.append((_JEQ_K, "futex", 0, _FUTEX[machine]))
    code.append((_JEQ_K, "madvise", 0, _MADVISE[machine]))
    code.append((_JEQ_K, "fcntl", 0, table["fcntl"]))
    code.append((_JEQ_K, "kill", 0, table["kill"]))
    code += [(_JEQ_K, "not_guarded", 0, table[name]) for name in ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")]
    code.append((_JEQ_K, "ioctl", 0, table["ioctl"]))
    code.append((_JEQ_K, "setpgid", 0, table["setpgid"]))
    rule_blocks: dict[tuple, str] = {}
    for name in CONDITIONAL:
        if name in RULES:
            label = rule_blocks.setdefault(RULES[name], f"rule{len(rule_blocks)}")
            code.append((_JEQ_K, label, 0, table[name]))
    code.append((_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    blocks: dict[str, list] = {}
    for rule, label in rule_blocks.items():
        # Each (argument, value) must hold, else EPERM. The kernel reads these arguments as
        # 32-bit ints, so the low half of each 64-bit slot is what it sees.
        block = []
        for argument, value in rule:
            block += [(_LD_W_ABS, 0, 0, _ARGS + 8 * argument), (_JEQ_K, 0, "ret_perm", value)]
        blocks[label] = block + [(_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    guard, group = GUARD_PLACEHOLDER, (-GUARD_PLACEHOLDER) & 0xFFFF_FFFF
    blocks["fcntl"] = (
        [(_LD_W_ABS, 0, 0, _ARGS + 8)]  # args[1]: the command
        + [(_JEQ_K, "ret_perm", 0, command) for command in (*REFUSED_FCNTL, F_SETOWN_EX)]
        + [(_JEQ_K, 0, "ret_allow", F_SETOWN), (_LD_W_ABS, 0, 0, _ARGS + 16)]  # F_SETOWN's args[2]: pid or -pgid
        + [(_JEQ_K, "ret_perm", 0, guard), (_JEQ_K, "ret_perm", 0, group), (_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    )
    blocks["kill"] = [
        (_LD_W_ABS, 0, 0, _ARGS), (_JEQ_K, "ret_perm", 0, guard), (_JEQ_K, "ret_perm", 0, group),
        (_JEQ_K, "ret_perm", 0, 0xFFFF_FFFF), (_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    blocks["futex"] = [
        (_LD_W_ABS, 0, 0, _ARGS + 8),  # args[1]: the op
        (_JSET_K, "ret_allow", "ret_perm", FUTEX_PRIVATE_FLAG),
    ]
    blocks["madvise"] = [
        (_LD_W_ABS, 0, 0, _ARGS + 16),  # args[2]: the advice
        *[(_JEQ_K, "ret_perm", 0, advice) for advice in REFUSED_MADVISE], (_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    blocks["setpgid"] = [(_LD_W_ABS, 0, 0, _ARGS + 8), (_JEQ_K, "ret_perm", 0, guard), (_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    blocks["not_guarded"] = [(_LD_W_ABS, 0, 0, _ARGS), (_JEQ_K, "ret_perm", 0, guard), (_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    blocks["ioctl"] = [
        (_LD_W_ABS, 0, 0, _ARGS + 8), (_JEQ_K, "ret_perm", 0, FIOSETOWN), (_JEQ_K, "ret_perm", 0, SIOCSPGRP),
        (_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    blocks.update({
        "socket": [
            (_LD_W_ABS, 0, 0, _ARGS),  # low 32 bits of args[0]: the kernel reads `int family`
            (_JEQ_K, "ret_allow", 0, AF_UNIX),
            *([(_JEQ_K, "ret_allow", 0, AF_INET), (_JEQ_K, "ret_allow", 0, AF_INET6)] if inet else []),
            (_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT),
        ],
        "ret_allow": [(_RET_K, 0, 0, SECCOMP_RET_ALLOW)],
        "ret_perm": [(_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)],
        "ret_nosys": [(_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)],
    })
    positions = {}
    for label, block in blocks.items():
        positions[label] = len(code)
        code += block
    out = []
    for index, (opcode, jt, jf, k) in enumerate(code):
        jt, jf = (positions[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise AssertionError("seccomp filter jump out of range")
        out.append(_insn(opcode, jt, jf, k))
    return b"".join(out)



def guard_sites(program: bytes) -> list[tuple[int, bool]]:
    """Where `program` (from `filter_program`) compares with GUARD_PLACEHOLDER: (byte offset
    of the constant, whether it is the negated form, a process group). The job process
    writes its own PID (or its negation) there before installing the filter."""
    negated = (-GUARD_PLACEHOLDER) & 0xFFFF_FFFF
    sites = []
    for at in range(0, len(program), 8):
        if program[at : at + 2] == _JEQ_K.to_bytes(2, "little"):
            k = int.from_bytes(program[at + 4 : at + 8], "little")
            if k in (GUARD_PLACEHOLDER, negated):
                sites.append((at + 4, k == negated))
    return sites
