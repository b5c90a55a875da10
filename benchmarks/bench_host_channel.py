"""Measure the host-wide channels that concurrent sandboxes may still share (issues 35 and 46).

Two real programs run side by side in a SandboxPool of two workers (two sandboxes, two host
uids): the sender does something host-wide in each time slot of a 1 bit and nothing for a 0;
the receiver reads a host-wide counter at every slot's end and decodes a 1 where it grew by more
than half of what the sender adds. Both find the slots from the wall clock (shared by every
sandbox). Printed per channel: the bits sent and received per trial, the bit errors, and the
raw rate in bits/s. A naive synchronization; a determined program would do better.

Channels (--channel, default all):
- forks: the kernel's count of forks since boot (the `processes` line of /proc/stat). The
  sandbox binds an empty file over /proc/stat (issue 46), so the receiver reads nothing:
  printed as closed.
- idle: the idle time of every CPU together (the second field of /proc/uptime), which a sender
  that spins through a 1-slot holds back. The sandbox binds an empty file over /proc/uptime
  (issue 46, with pressure/, the host's stall times): printed as closed.
- inodes: inode numbers of pipes, sockets and anonymous files, handed out per CPU in batches
  of 1,024 from one host-wide counter (Linux's get_next_ino). The sender makes `--pipes` pipes
  in a 1-slot; the receiver makes pipes until it enters a new batch, whose number tells how many
  batches every CPU of the host took since its last one. Nothing in /proc: it cannot be hidden.

    python benchmarks/bench_host_channel.py [--channel forks|idle|inodes|all] [--trials 5] [--bits 16] [--slot 0.1]
"""

from __future__ import annotations

import argparse
import os
import random

from gdpo_nemo.sandbox import Case, Limits, Sandbox, SandboxPool

SLOTS = """
import os, time
slot = {slot}
start = int(time.time()) + 2
while time.time() < start:
    time.sleep(0.005)
def wait_until(moment):
    while time.time() < moment:
        time.sleep(0.002)
"""

SENDERS = {
    "forks": """
def send():
    for _ in range({amount}):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
""",
    "idle": """
def send():
    busy_until = time.time() + {amount} * slot
    while time.time() < busy_until:
        pass
""",
    "inodes": """
def send():
    for _ in range({amount}):
        r, w = os.pipe()
        os.close(r)
        os.close(w)
""",
}
SENDER = """
for index, bit in enumerate({bits!r}):
    if bit == "1":
        send()
    wait_until(start + (index + 1) * slot)
"""

READERS = {
    "forks": """
def read():
    for line in open("/proc/stat"):
        if line.startswith("processes"):
            return int(line.split()[1])
    return None  # hidden: the sandbox's /proc/stat is empty
""",
    "idle": """
def read():
    # hundredths of a second all CPUs spent idle, negated: a spinning sender makes it grow
    fields = open("/proc/uptime").read().split()
    return -round(float(fields[1]) * 100) if fields else None  # hidden: empty
""",
    "inodes": """
def read():
    # make pipes until this CPU's batch of 1,024 inode numbers runs out: the new batch's index
    # is the host-wide count of batches taken so far (minus the one just taken for us)
    first = None
    for _ in range(2100):
        r, w = os.pipe()
        number = os.fstat(r).st_ino
        os.close(r)
        os.close(w)
        batch = number // 1024
        if first is None:
            first = batch
        elif batch != first:
            return batch - 1
    return None
""",
}
RECEIVER = """
last, received = read(), ""
if last is None:
    print("hidden")
    raise SystemExit
for index in range({count}):
    wait_until(start + (index + 0.8) * slot)  # what the sender did for bit `index` is done by then
    now = read()
    received += "1" if now - last > {threshold} else "0"
    last = now
print(received)
"""
# What a 1 sends (forks, or pipes: 4 batches of inode numbers), and the receiver's threshold.
# idle: the sender spins for 0.7 of a slot, holding back 0.7 slot of one CPU's idle time; the
# threshold (set per run from the slot and the CPUs) lies halfway.
AMOUNTS = {"forks": (40, 20), "idle": (0.7, None), "inodes": (4096, 2)}


def measure(pool, channel: str, trials: int, bits: int, slot: float, generator: random.Random) -> None:
    amount, threshold = AMOUNTS[channel]
    if channel == "idle":  # idle hundredths per slot, negated: all CPUs idle, less half the spin
        threshold = -round((os.cpu_count() - amount / 2) * slot * 100)
    errors = total = 0
    for trial in range(trials):
        sent_bits = "".join(generator.choice("01") for _ in range(bits))
        head = SLOTS.format(slot=slot)
        sender = head + SENDERS[channel].format(amount=amount) + SENDER.format(bits=sent_bits)
        receiver = head + READERS[channel] + RECEIVER.format(count=bits, threshold=threshold)
        [[_], [received]] = pool.run_many([(sender, [Case()]), (receiver, [Case()])])
        got = received.stdout.strip()
        if got == "hidden":
            print(f"{channel}: closed (the counter reads empty inside the sandbox)")
            return
        wrong = sum(a != b for a, b in zip(got.ljust(len(sent_bits), "?"), sent_bits))
        errors, total = errors + wrong, total + len(sent_bits)
        print(f"{channel} trial {trial}: sent {sent_bits} received {got or '(nothing: ' + received.status + ')'} "
              f"errors {wrong}/{len(sent_bits)}")
    print(f"{channel}: raw rate {1 / slot:.0f} bits/s; bit errors {errors}/{total} ({errors / total:.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--channel", choices=[*SENDERS, "all"], default="all")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--bits", type=int, default=16, help="bits per trial (default 16)")
    parser.add_argument("--slot", type=float, default=0.1, help="seconds per bit (default 0.1)")
    args = parser.parse_args()
    limits = Limits(cpu_seconds=5, wall_seconds=10 + args.bits * args.slot, memory_bytes=256 << 20,
                    max_processes=8, tmp_bytes=8 << 20)
    generator = random.Random(0)
    with SandboxPool(workers=2, sandbox=Sandbox(), limits=limits) as pool:
        for channel in (SENDERS if args.channel == "all" else [args.channel]):
            measure(pool, channel, args.trials, args.bits, args.slot, generator)


if __name__ == "__main__":
    main()
