"""Measure a host-wide channel that concurrent sandboxes still share: the kernel's count of
forks since boot (the `processes` line of /proc/stat, one counter for the whole machine).

Two real programs run side by side in a SandboxPool of two workers (two sandboxes, two host
uids): the sender forks `--forks` short-lived processes in each time slot of a 1 bit and none
for a 0; the receiver reads the counter at every slot's middle and decodes a 1 where it grew
by more than half the forks. Both find the slots from the wall clock (shared by every
sandbox). Printed: the bits sent and received per trial, the bit errors, and the raw rate in
bits/s. This is what docs/sandbox.md quotes for the channels that remain (issue 35): a naive
synchronization; a determined program would do better.

    python benchmarks/bench_host_channel.py [--trials 5] [--slot 0.1] [--forks 40]
"""

from __future__ import annotations

import argparse
import random

from gdpo_nemo.sandbox import Case, Limits, Sandbox, SandboxPool

SENDER = """
import os, time
bits, slot, forks = {bits!r}, {slot}, {forks}
start = int(time.time()) + 2
while time.time() < start:
    time.sleep(0.005)
for index, bit in enumerate(bits):
    if bit == "1":
        for _ in range(forks):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
    while time.time() < start + (index + 1) * slot:
        time.sleep(0.002)
"""
RECEIVER = """
import time
def forks_so_far():
    for line in open("/proc/stat"):
        if line.startswith("processes"):
            return int(line.split()[1])
slot, count, threshold = {slot}, {count}, {threshold}
start = int(time.time()) + 2
while time.time() < start:
    time.sleep(0.005)
last, received = forks_so_far(), ""
for index in range(count):
    while time.time() < start + (index + 0.8) * slot:  # the forks of bit `index` are done by then
        time.sleep(0.002)
    now = forks_so_far()
    received += "1" if now - last > threshold else "0"
    last = now
print(received)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--bits", type=int, default=16, help="bits per trial (default 16)")
    parser.add_argument("--slot", type=float, default=0.1, help="seconds per bit (default 0.1)")
    parser.add_argument("--forks", type=int, default=40, help="forks that send a 1 (default 40)")
    args = parser.parse_args()
    limits = Limits(cpu_seconds=5, wall_seconds=10 + args.bits * args.slot, memory_bytes=256 << 20,
                    max_processes=8, tmp_bytes=8 << 20)
    generator = random.Random(0)
    errors = total = 0
    with SandboxPool(workers=2, sandbox=Sandbox(), limits=limits) as pool:
        for trial in range(args.trials):
            bits = "".join(generator.choice("01") for _ in range(args.bits))
            sender = SENDER.format(bits=bits, slot=args.slot, forks=args.forks)
            receiver = RECEIVER.format(slot=args.slot, count=args.bits, threshold=args.forks // 2)
            [[sent], [received]] = pool.run_many([(sender, [Case()]), (receiver, [Case()])])
            got = received.stdout.strip()
            wrong = sum(a != b for a, b in zip(got.ljust(len(bits), "?"), bits))
            errors, total = errors + wrong, total + len(bits)
            print(f"trial {trial}: sent {bits} received {got or '(nothing: ' + received.status + ')'} "
                  f"errors {wrong}/{len(bits)}")
    print(f"raw rate {1 / args.slot:.0f} bits/s; bit errors {errors}/{total} ({errors / total:.0%})")


if __name__ == "__main__":
    main()
