"""Issue 46: no page-cache channel between programs (gdpo_nemo.sandbox.runtime).

The reproducer's method, run by real programs in real sandboxes: a sender marks pages of a
file every sandbox can read (evicts the window with fadvise, then reads one byte of each page
that carries a 1), and a receiver reads the window's residency without changing it: a
non-blocking read per page (RWF_NOWAIT: EAGAIN when the page is not cached), mincore on a
mapping of the file, its own page map after one fault (the kernel maps the cached neighbours of
a faulting page), and the time of a one-byte read per page. With the host's files bound into
the sandbox (the old layout, kept as the control) the receiver reads the sender's bits (the
non-blocking read gets 99 %: mincore already reports every page of a file the caller cannot
write as resident, and the page map is closed to the non-dumpable program); with
the tmpfs copy every probe sees every page resident, whatever the sender did, concurrently
and in the next program of the same sandbox.
"""

from __future__ import annotations

import json
import random
import warnings

import pytest
from sandbox_support import needs_bwrap

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
"""

SENDER = COMMON + """
bits = {pattern!r}
os.posix_fadvise(fd, offset(0), BITS * PAGE, os.POSIX_FADV_DONTNEED)
for i, bit in enumerate(bits):
    if bit == "1":
        os.pread(fd, 1, offset(i))
print("sent", flush=True)
time.sleep({hold})
"""

RECEIVER = COMMON + """
time.sleep({wait})
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
print(json.dumps({{"nowait": nowait, "mincore": core, "pagemap": paged, "ns": timed}}), flush=True)
"""


def _pattern(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("01") for _ in range(BITS))


def _observe(pool_or_box, pattern: str, *, concurrent: bool) -> dict:
    sender = SENDER.format(bits=BITS, pattern=pattern, hold=1.5 if concurrent else 0)
    receiver = RECEIVER.format(bits=BITS, wait=0.5 if concurrent else 0)
    if concurrent:  # two sandboxes at once: the receiver probes while the sender holds its marks
        results = pool_or_box.run_many([(sender, [Case()]), (receiver, [Case()])])
        sent, seen = results[0][0], results[1][0]
    else:  # one after the other, in the same reused sandbox
        sent = pool_or_box.run_cases(sender, [Case()], LIMITS)[0]
        seen = pool_or_box.run_cases(receiver, [Case()], LIMITS)[0]
    assert sent.stdout.startswith("sent"), (sent.status, sent.stderr[-2000:])
    assert seen.status == "ok", (seen.status, seen.stderr[-2000:])
    return json.loads(seen.stdout)


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
    built = runtime._BUILT.get(box.python)
    runtime._BUILT[box.python] = (None, "the test's control: the host's files")
    try:
        with warnings.catch_warnings():  # the Sandbox says, once, that programs read the host's files
            warnings.simplefilter("ignore", RuntimeWarning)
            box._get_isolation()
    finally:
        if built is None:
            runtime._BUILT.pop(box.python, None)
        else:
            runtime._BUILT[box.python] = built
    assert box._get_isolation().runtime is None
    return box


@needs_bwrap
def test_the_probes_read_a_senders_pages_through_the_host_files_page_cache(host_files_box):
    """The control: the method works where the channel exists (what every sandbox had)."""
    from gdpo_nemo.sandbox import SandboxWorker

    worker = SandboxWorker(host_files_box, LIMITS.tmp_bytes)
    try:
        pattern = _pattern(1)
        seen = _observe(worker, pattern, concurrent=False)
    finally:
        worker.close()
    # the non-blocking read decodes the sender's bits (mincore does not: this kernel reports a
    # file the caller cannot write as all resident, its own defence against this probe)
    assert _agreement(seen["nowait"], pattern) >= 0.95, seen


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
        # timing: all reads are page-cache hits; what a median cut decodes is chance
        assert _agreement(_timing_bits(seen["ns"]), pattern) <= 0.75, (pattern, seen["ns"])


ASK = """
import json, sys
from gdpo_nemo.sandbox.runtime import runtime_root
root, why = runtime_root("/usr/bin/python3" if len(sys.argv) < 2 else sys.argv[1])
print(json.dumps({"path": str(root.path) if root else None, "why": why, "tops": list(root.tops) if root else []}))
sys.stdin.read()  # holds the copy until told to stop
"""


def test_one_copy_per_host_and_interpreter_serves_every_harness_and_an_unused_old_one_goes(tmp_path):
    """Harness processes share one copy (the first builds it, the others find it); a copy of
    another interpreter that a live harness holds stays, one nobody holds is removed."""
    import fcntl
    import os
    import subprocess
    import sys
    from pathlib import Path

    from gdpo_nemo.sandbox import leases, runtime

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    unused, held = (runtime.SHM / f"gdpo-nemo-runtime-{name}" for name in ("0000aaaa0000aaaa", "0000bbbb0000bbbb"))
    for old in (unused, held):
        (old / "usr").mkdir(parents=True, exist_ok=True)
    leases.lease_dir().mkdir(parents=True, exist_ok=True)
    holder = os.open(leases.lease_dir() / "runtime-0000bbbb0000bbbb.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_SH)  # a live harness of another interpreter
    harnesses = [subprocess.Popen([sys.executable, "-c", ASK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env) for _ in range(2)]
    try:
        seen = [json.loads(h.stdout.readline()) for h in harnesses]
        assert seen[0]["path"] == seen[1]["path"] is not None and seen[0]["why"] == "", seen
        assert set(seen[0]["tops"]) >= {"usr", "etc"}
        assert not unused.exists() and held.exists()
    finally:
        for h in harnesses:
            h.stdin.close()
            h.wait()
        os.close(holder)
        import shutil

        shutil.rmtree(held, ignore_errors=True)
        shutil.rmtree(unused, ignore_errors=True)
        (leases.lease_dir() / "runtime-0000bbbb0000bbbb.lock").unlink(missing_ok=True)
    assert not (leases.lease_dir() / "runtime-0000aaaa0000aaaa.lock").exists()  # removed with its copy
