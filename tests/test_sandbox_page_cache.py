"""Issue 46: no page-cache channel between programs (gdpo_nemo.sandbox.runtime).

The reproducer's method, run by real programs in real sandboxes: a sender marks pages of a
file every sandbox can read (evicts the window with fadvise, then reads one byte of each page
that carries a 1, and keeps a one-page mapping of it), and a receiver reads the window's
residency without changing it: a non-blocking read per page (RWF_NOWAIT: EAGAIN when the page is
not cached), mincore on a mapping of the file, its own page map after one fault (the kernel maps
the cached neighbours of a faulting page), the time of a one-byte read per page, and last how
many processes map each page (its own one-page mappings' Pss in /proc/self/smaps: 4 kB shared
by that count). With the host's files bound into the sandbox (the old layout, kept as the
control) the receiver reads the sender's bits (the non-blocking read and the map count get
99 %: mincore already reports every page of a file the caller cannot write as resident, and
the page map is closed to the non-dumpable program); one tmpfs copy shared by every sandbox
kept every page resident but still showed the map count (160 of 160 bits in 9 ms); with a copy
of its own per sandbox every probe sees every page resident and mapped by itself alone,
whatever the sender did, concurrently and in the next program of the same sandbox.
"""

from __future__ import annotations

import json
import random
import warnings

import pytest
from sandbox_support import needs_bwrap, sandbox  # noqa: F401  (the fixture)

from gdpo_nemo.sandbox import Case, Limits, Sandbox, SandboxPool

BITS = 96
LIMITS = Limits(cpu_seconds=5, wall_seconds=20, memory_bytes=256 << 20, max_processes=8, tmp_bytes=8 << 20)

COMMON = """
import ctypes, json, mmap, os, sys, time
PAGE = mmap.PAGESIZE
BITS = {bits}
path = os.path.join(os.path.dirname(os.__file__), "pydoc_data", "topics.py")  # ~700 KB, rarely read
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead: one page per read
def offset(i):
    return (i + 1) * PAGE
def window(i):  # a mapping of page i alone, faulted in (without reading the pages around it in)
    page = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ, offset=offset(i))
    page.madvise(mmap.MADV_RANDOM)
    page[0]
    return page
"""

SENDER = COMMON + """
bits = {pattern!r}
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the whole file: a large folio across the window's edge goes too
for i, bit in enumerate(bits):
    if bit == "1":
        os.pread(fd, 1, offset(i))
held = [window(i) for i, bit in enumerate(bits) if bit == "1"]
marked = time.time()
time.sleep({hold})
print("sent", marked, time.time(), flush=True)  # when the marks were all there, and until when
"""

RECEIVER = COMMON + """
time.sleep({wait})
began = time.time()
libc = ctypes.CDLL(None, use_errno=True)
length = (BITS + 1) * PAGE
mapped = mmap.mmap(fd, length, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
vector = (ctypes.c_ubyte * (BITS + 1))()
assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(length), vector) == 0, ctypes.get_errno()
core = [vector[i + 1] & 1 for i in range(BITS)]
# mincore first: it changes nothing; a non-blocking read of an uncached page starts
# reading it in (then fails with EAGAIN), so it comes second.
nowait = []
for i in range(BITS):
    try:
        os.preadv(fd, [bytearray(1)], offset(i), os.RWF_NOWAIT)
        nowait.append(1)
    except BlockingIOError:
        nowait.append(0)
    except OSError as error:  # EOPNOTSUPP: the file system has no non-blocking reads (tmpfs)
        nowait.append(-error.errno)
# One fault on page 0: the kernel maps the cached pages around it (fault-around, 16 pages), so
# the page map's present bits of pages 1-15 tell which of them were cached.
_ = mapped[0]
try:
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek((address // PAGE + 1) * 8)
        entries = pagemap.read(8 * 15)
    paged = [(int.from_bytes(entries[8 * i: 8 * i + 8], "little") >> 63) & 1 for i in range(15)]
except PermissionError:  # the driver makes programs non-dumpable: /proc/self/pagemap is root's
    paged = None
timed = []
for i in range(BITS):
    start = time.perf_counter_ns()
    os.pread(fd, 1, offset(i))
    timed.append(time.perf_counter_ns() - start)
# How many processes map each page: a one-page mapping's Pss is 4 kB over that count (the
# window above goes first: its own mapping of pages 1-15 would count twice).
mapped.close()
windows = [window(i) for i in range(BITS)]
pss = {{}}
with open("/proc/self/smaps") as smaps:
    page = None
    for line in smaps:
        fields = line.split()
        if fields[-1] == path and len(fields) == 6:
            page = int(fields[2], 16) // PAGE - 1
        elif page is not None and fields[0] == "Pss:":
            pss[page], page = int(fields[1]), None
shared = [1 if pss.get(i, 4) < PAGE // 1024 else 0 for i in range(BITS)]
print(json.dumps({{"nowait": nowait, "mincore": core, "pagemap": paged, "ns": timed, "shared": shared,
                  "probed": [began, time.time()]}}), flush=True)
"""


def _pattern(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("01") for _ in range(BITS))


def _observe(pool_or_box, pattern: str, *, concurrent: bool) -> dict:
    """What the receiver saw after (or, `concurrent`, while) the sender marked `pattern`."""
    sender = SENDER.format(bits=BITS, pattern=pattern, hold=1.5 if concurrent else 0)
    receiver = RECEIVER.format(bits=BITS, wait=0.5 if concurrent else 0)
    for _ in range(3):
        if concurrent:  # two sandboxes at once: the receiver probes while the sender holds its marks
            pool_or_box.run_many([("pass", [Case()]), ("pass", [Case()])])  # both sandboxes started
            results = pool_or_box.run_many([(sender, [Case()]), (receiver, [Case()])])
            sent, seen = results[0][0], results[1][0]
        else:  # one after the other, in the same reused sandbox
            sent = pool_or_box.run_cases(sender, [Case()], LIMITS)[0]
            seen = pool_or_box.run_cases(receiver, [Case()], LIMITS)[0]
        assert sent.stdout.startswith("sent"), (sent.status, sent.stderr[-2000:])
        assert seen.status == "ok", (seen.status, seen.stderr[-2000:])
        marked, until = map(float, sent.stdout.split()[1:3])
        observed = json.loads(seen.stdout)
        began, ended = observed["probed"]
        if not concurrent or marked <= began and ended <= until:
            return observed
        # a loaded machine started one sandbox's program too late for the two to overlap: again
    raise AssertionError(f"the receiver never probed while the sender held its marks ({marked}-{until}: {began}-{ended})")


def _agreement(observed: list, pattern: str) -> float:
    return sum(int(bit) == value for bit, value in zip(pattern, observed)) / len(observed)


def _timing_bits(ns: list) -> list:
    cut = sorted(ns)[len(ns) // 2]
    return [1 if value <= cut else 0 for value in ns]  # fast read: cached


@pytest.fixture(scope="module")
def host_files_box():
    """The old layout, as the control: the host's directories bound into the sandbox."""
    from gdpo_nemo.sandbox import runtime

    box = Sandbox(backend="bwrap")
    built = runtime._COPIES.get(box.python)
    runtime._COPIES[box.python] = (None, "the test's control: the host's files")
    try:
        with warnings.catch_warnings():  # the Sandbox says, once, that programs read the host's files
            warnings.simplefilter("ignore", RuntimeWarning)
            box._get_isolation()
    finally:
        if built is None:
            runtime._COPIES.pop(box.python, None)
        else:
            runtime._COPIES[box.python] = built
    assert box._get_isolation().runtime is None
    return box


@needs_bwrap
def test_the_probes_read_a_senders_pages_through_the_host_files_page_cache(host_files_box):
    """The control: the method works where the channel exists (what every sandbox had)."""
    from gdpo_nemo.sandbox import SandboxWorker

    # The channel is real but not exact on a loaded machine: the host's memory reclaim evicts
    # marked pages too (under a suite on three workers one sequential read agreed on 0.875 of
    # the bits), so the control takes the best of three sends; one clean read proves the method.
    worker = SandboxWorker(host_files_box, LIMITS.tmp_bytes)
    try:
        pattern = _pattern(1)
        seen = _best_of_three(lambda: _observe(worker, pattern, concurrent=False), "nowait", pattern)
    finally:
        worker.close()
    # the non-blocking read decodes the sender's bits (mincore does not: this kernel reports a
    # file the caller cannot write as all resident, its own defence against this probe)
    assert _agreement(seen["nowait"], pattern) >= 0.95, seen
    with SandboxPool(workers=2, sandbox=host_files_box, limits=LIMITS) as pool:
        seen = _best_of_three(lambda: _observe(pool, pattern, concurrent=True), "shared", pattern)
    # and the map count reads the pages a concurrent sender maps
    assert _agreement(seen["shared"], pattern) >= 0.95, seen


def _best_of_three(observe, probe: str, pattern: str) -> dict:
    """The observation whose `probe` agrees best with `pattern`, of up to three (fewer once one
    agrees on 95 % of the bits)."""
    best = None
    for _ in range(3):
        seen = observe()
        if best is None or _agreement(seen[probe], pattern) > _agreement(best[probe], pattern):
            best = seen
        if _agreement(best[probe], pattern) >= 0.95:
            break
    return best


@needs_bwrap
@pytest.mark.parametrize("concurrent", [True, False], ids=["concurrent", "sequential"])
def test_no_probe_reads_anything_a_sender_did_to_the_files_programs_can_read(concurrent):
    from gdpo_nemo.sandbox import SandboxWorker

    box = Sandbox(backend="bwrap")
    assert box._get_isolation().runtime is not None, box._get_isolation().runtime_note
    with SandboxPool(workers=2, sandbox=box, limits=LIMITS) as pool:
        worker = SandboxWorker(box, LIMITS.tmp_bytes)
        try:
            observed = [(seed, _observe(pool if concurrent else worker, _pattern(seed), concurrent=concurrent))
                        for seed in (2, 3)]
        finally:
            worker.close()
    for seed, seen in observed:
        pattern = _pattern(seed)
        # every page resident, whatever was sent: nothing to decode (a tmpfs has no
        # non-blocking read: EOPNOTSUPP for every page, as constant as "cached")
        assert seen["nowait"] in ([1] * BITS, [-95] * BITS) and seen["mincore"] == [1] * BITS, seen
        assert seen["pagemap"] in (None, [1] * 15), seen
        # no page is mapped by any other process (one copy shared by every sandbox: 100 %)
        assert seen["shared"] == [0] * BITS, seen
        # timing: all reads are page-cache hits; what a median cut decodes is chance
        assert _agreement(_timing_bits(seen["ns"]), pattern) <= 0.75, (pattern, seen["ns"])


HOLD = """
import json, sys
from pathlib import Path
from gdpo_nemo.sandbox import runtime
runtime.SHM = Path(sys.argv[2])  # the test's own place: copies no other process takes or removes meanwhile
copies, why = runtime.runtime_copies(sys.argv[1])
root = copies.take()
print(json.dumps({"path": str(root.path), "tops": list(root.tops), "inode": root.empty.stat().st_ino}), flush=True)
sys.stdin.read()  # holds the copy until told to stop
"""


@needs_bwrap
def test_each_harness_holds_a_copy_of_its_own_until_it_gives_it_back_and_old_copies_go(monkeypatch):
    """Two harness processes that each hold a copy hold different copies (different files,
    different pages); once one gives its copy back (here by ending) the next taker gets that
    copy, not a new one. Copies of another interpreter, shared copies of the layout before and
    copies past the first KEPT_COPIES that nobody holds are removed; those held stay."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from gdpo_nemo.sandbox import leases, runtime
    from gdpo_nemo.sandbox.isolation import default_python

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    place = runtime.SHM / f"gdpo-nemo-test-{os.getpid()}"  # a tmpfs, as /dev/shm is
    place.mkdir()
    monkeypatch.setattr(runtime, "SHM", place)
    monkeypatch.setattr(runtime, "_COPIES", {})  # this process looks there, as a new harness would

    def hold():
        harness = subprocess.Popen([sys.executable, "-c", HOLD, default_python(), str(place)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=env)
        harnesses.append(harness)
        return json.loads(harness.stdout.readline())

    harnesses, holders = [], []
    try:
        first, second = hold(), hold()
        assert first["path"] != second["path"] and first["inode"] != second["inode"], (first, second)
        assert set(first["tops"]) >= {"usr", "etc"}
        harnesses[0].stdin.close()
        harnesses[0].wait()  # gives its copy back (the kernel drops the lease with the process)
        assert hold()["path"] == first["path"]  # the copy given back, not a new one
        home = runtime.copies_home()
        copies = runtime.runtime_copies(default_python())[0]
        assert copies is not None and str(copies.home) == str(home)
        # what a harness removes at its start, when nobody holds it
        unused, held = home / "0000aaaa0000aaaa-0", home / "0000bbbb0000bbbb-3"  # another interpreter's
        surplus, kept = (copies.path(runtime.KEPT_COPIES + n) for n in (5, 6))  # this one's, past KEPT_COPIES
        shared = place / "gdpo-nemo-runtime-0000cccc0000cccc"  # the layout before: one for every sandbox
        for path in (unused, held, surplus, kept, shared):
            (path / "usr").mkdir(parents=True)
        holders += [leases.try_take("runtime_0000bbbb0000bbbb", 3, directory=home / "locks"),
                    leases.try_take(copies.kind, runtime.KEPT_COPIES + 6, directory=home / "locks")]
        runtime._COPIES.clear()
        runtime.runtime_copies(default_python())
        assert [path.exists() for path in (unused, held, surplus, kept, shared)] == [False, True, False, True, False]
        assert not leases.lease_path("runtime_0000aaaa0000aaaa", 0, directory=home / "locks").exists()
    finally:
        for harness in harnesses:
            if harness.poll() is None:
                harness.stdin.close()
                harness.wait()
        for holder in holders:
            holder.release()
        shutil.rmtree(place, ignore_errors=True)


HELD = """
import ctypes, errno, json, mmap, os, platform
fd = os.open(os.path.join(os.path.dirname(os.__file__), "pydoc_data", "topics.py"), os.O_RDONLY)
mapped = mmap.mmap(fd, 64 * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
mapped[0]
def outcome(call):
    try:
        call()
        return "ok"
    except OSError as error:
        return errno.errorcode[error.errno]
seen = {{name: outcome(lambda advice=advice: mapped.madvise(advice)) for name, advice in {advice!r}.items()}}
libc = ctypes.CDLL(None, use_errno=True)
address = ctypes.addressof(ctypes.c_char.from_buffer(bytearray(mmap.PAGESIZE)))
numbers = {numbers!r}[platform.machine()]
nodes = (ctypes.c_ulong * 1)(1)
status = (ctypes.c_int * 1)()
pages = (ctypes.c_void_p * 1)(address - address % mmap.PAGESIZE)
arguments = {{
    "mbind": (pages[0], mmap.PAGESIZE, 0, None, 0, 2),  # MPOL_DEFAULT, MPOL_MF_MOVE
    "migrate_pages": (0, 64, nodes, nodes),
    "move_pages": (0, 1, pages, None, status, 0),
    "get_mempolicy": (status, None, 0, pages[0], 3),  # MPOL_F_NODE | MPOL_F_ADDR: the node a page lies on
}}
for name, args in arguments.items():
    result = libc.syscall(ctypes.c_long(numbers[name]), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    seen[name] = "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(seen))
"""


@needs_bwrap
def test_a_program_cannot_change_how_the_pages_of_the_files_it_reads_are_held(sandbox):
    """The next sandbox to lease a copy reads it after this one: the filter refuses pushing its
    pages towards swap, collapsing them into huge pages, moving them between NUMA nodes and
    asking which node a page lies on (EPERM); advice that changes nothing for another reader
    still works."""
    advice = {"MADV_COLD": 20, "MADV_PAGEOUT": 21, "MADV_HUGEPAGE": 14, "MADV_COLLAPSE": 25, "MADV_WILLNEED": 3,
              "MADV_NORMAL": 0}
    numbers = {"x86_64": {"mbind": 237, "migrate_pages": 256, "move_pages": 279, "get_mempolicy": 239},
               "aarch64": {"mbind": 235, "migrate_pages": 238, "move_pages": 239, "get_mempolicy": 236}}
    [result] = sandbox.run_cases(HELD.format(advice=advice, numbers=numbers), [Case()], LIMITS)
    assert result.status == "ok", result.stderr[-2000:]
    seen = json.loads(result.stdout)
    assert {name: seen[name] for name in ("MADV_WILLNEED", "MADV_NORMAL")} == {"MADV_WILLNEED": "ok", "MADV_NORMAL": "ok"}
    refused = ("MADV_COLD", "MADV_PAGEOUT", "MADV_HUGEPAGE", "MADV_COLLAPSE", "mbind", "migrate_pages", "move_pages",
               "get_mempolicy")
    assert {name: seen[name] for name in refused} == {name: "EPERM" for name in refused}, seen


def test_where_no_more_copies_fit_a_sandbox_waits_for_one_given_back(monkeypatch):
    """A full /dev/shm (a container's is 64 MiB by default) holds fewer copies than sandboxes
    want: a start then waits for a copy another sandbox gives back, and says so once, instead
    of failing or sharing one."""
    import errno
    import os
    import shutil
    import threading

    from gdpo_nemo.sandbox import notices, runtime
    from gdpo_nemo.sandbox.isolation import default_python

    place = runtime.SHM / f"gdpo-nemo-test-{os.getpid()}"  # a tmpfs, as /dev/shm is
    place.mkdir()
    monkeypatch.setattr(runtime, "SHM", place)
    monkeypatch.setattr(runtime, "_COPIES", {})
    monkeypatch.setattr(notices, "_warned", set())
    try:
        copies = runtime.runtime_copies(default_python())[0]
        assert copies is not None
        first = copies.take()

        def full(*args):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(runtime, "_build", full)
        threading.Timer(0.3, first.release).start()  # another sandbox ends
        with pytest.warns(RuntimeWarning, match="no room for another copy"):
            second = copies.take()
        assert second.path == first.path and copies.numbers() == [first.lease.number]
        second.release()
    finally:
        shutil.rmtree(place, ignore_errors=True)
