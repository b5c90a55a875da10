"""Math answer verification with `math-verify`, under a hard time limit that works anywhere.

Why a worker process: math-verify's own time limit is `signal.alarm`, which only works on
the main thread of the main interpreter (math-verify raises otherwise), and no in-process
limit can stop a C-level hang (a huge sympy power, a regex blow-up). Reward code runs in
threads, Ray actors and data-loader workers, and adversarial LaTeX does hang math-verify.
So `MathVerifier` runs math-verify in persistent worker subprocesses (its own timeouts
disabled) and enforces the limit twice:

1. inside the worker, an interval timer (`setitimer`, fractions of a second allowed)
   interrupts a slow call after `timeout_s`; the worker answers "timeout" and lives on;
2. the caller waits at most `timeout_s + GRACE_S` for any answer; a worker stuck where the
   timer cannot reach is killed and replaced on the next call (0.6-1.5 s to restart).

Each worker also runs under an address-space limit (`memory_limit_mb`) so one runaway
expression cannot take the node's memory. Linux/POSIX only (pipes are polled).

Cost, measured by benchmarks/bench_rewards.py on 2 busy shared CPU cores (load 5-6): 1.9-4.5
ms per answer in the worker against 2.0-3.5 ms calling math-verify in-process, so the pipe
round trip is within the run-to-run noise; a worker starts in 0.6-1.5 s, which is also the
price of replacing a stuck one.
Use `num_workers` > 1 for large batches (one math step is 512 x 16 answers).

This file is also the worker's program: it is run by path (`runpy.run_path`) in a fresh
`python -I`, so its top level imports only the standard library.

Semantics follow NeMo RL's `hf_math_verify`: the ground truth is wrapped as `\\boxed{...}`
and parsed with LaTeX extraction; the whole completion is parsed with expression and LaTeX
extraction; `verify(gold, prediction, float_rounding=6)`.
"""

from __future__ import annotations

import json
import math
import os
import queue
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from gdpo_nemo.errors import UserError

CORRECT = "correct"
WRONG = "wrong"
TIMEOUT = "timeout"
GOLD_UNPARSABLE = "gold_unparsable"
ERROR = "error"
STATUSES = (CORRECT, WRONG, TIMEOUT, GOLD_UNPARSABLE, ERROR)

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_LIMIT_MB = 4096
GRACE_S = 2.0
STARTUP_TIMEOUT_S = 60.0

_BOOTSTRAP = (
    "import json, runpy, sys; "
    "sys.path[:0] = [p for p in json.loads(sys.argv[1]) if p not in sys.path]; "
    "runpy.run_path(sys.argv[2], run_name='gdpo_nemo_math_verify_worker')"
    "['worker_main'](float(sys.argv[3]), int(sys.argv[4]))"
)


class MathVerifyUnavailable(RuntimeError):
    """The math-verify worker could not start (math-verify missing or broken): a setup error."""


# ----------------------------------------------------------------------------- worker side


class _Deadline(BaseException):
    """Raised by the worker's timer; a BaseException so math-verify's `except Exception` lets it pass."""


def worker_main(timeout_s: float, memory_limit_mb: int) -> None:
    """The worker loop: one JSON request per stdin line, one JSON answer per line on the
    protocol channel. Request {"gold": str, "prediction": str}; answer {"status": STATUS}."""
    import logging
    import resource
    import signal
    from functools import lru_cache

    # The protocol gets a private copy of stdout; fds 1 and 2 go to /dev/null so whatever
    # sympy or math-verify print cannot corrupt it.
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    if memory_limit_mb > 0:
        limit = memory_limit_mb * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass  # a hard limit lower than ours is already stricter
    try:
        logging.disable(logging.CRITICAL)
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except Exception as err:  # report any import failure to the parent instead of dying silently
        send({"ready": False, "error": f"{type(err).__name__}: {err}"})
        return

    gold_config = [LatexExtractionConfig()]
    prediction_config = [ExprExtractionConfig(), LatexExtractionConfig()]

    @lru_cache(maxsize=4096)
    def parse_gold(gold: str) -> tuple:
        return tuple(parse("\\boxed{" + gold + "}", gold_config, parsing_timeout=None))

    def check(gold: str, prediction: str) -> str:
        parsed_gold = parse_gold(gold)
        if not parsed_gold:
            return GOLD_UNPARSABLE
        parsed_prediction = parse(prediction, prediction_config, parsing_timeout=None)
        if not parsed_prediction:
            return WRONG
        return CORRECT if verify(list(parsed_gold), parsed_prediction, 6, timeout_seconds=None) else WRONG

    def on_alarm(signum, frame):
        raise _Deadline

    signal.signal(signal.SIGALRM, on_alarm)
    check("1", "\\boxed{1}")  # warm the lazy imports so the first real answer is not charged for them
    send({"ready": True})
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            try:
                signal.setitimer(signal.ITIMER_REAL, timeout_s)
                status = check(request["gold"], request["prediction"])
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            status = TIMEOUT
        except (Exception, RecursionError, MemoryError):
            status = ERROR
        send({"status": status})


# ----------------------------------------------------------------------------- caller side


class _Worker:
    """One worker subprocess and its pipes."""

    def __init__(self, timeout_s: float, memory_limit_mb: int):
        paths = [os.path.abspath(p) for p in sys.path if p]
        command = [
            sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(paths),
            os.path.abspath(__file__), repr(timeout_s), str(memory_limit_mb),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
        )
        self._buffer = b""
        self._owner_pid = os.getpid()
        self._poll = select.poll()
        self._poll.register(self.process.stdout.fileno(), select.POLLIN)
        ready = self._read_line(STARTUP_TIMEOUT_S)
        if not ready or not ready.get("ready"):
            reason = (ready or {}).get("error") or self._exit_reason()
            self.close()
            raise MathVerifyUnavailable(f"the math-verify worker did not start: {reason}")

    def _exit_reason(self) -> str:
        code = self.process.poll()
        if code is None:
            return f"no answer within {STARTUP_TIMEOUT_S:.0f} s"
        try:
            detail = self.process.stderr.read(4000).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            detail = ""
        return f"exit code {code}" + (f": {detail.splitlines()[-1]}" if detail else "")

    def _read_line(self, wait_s: float) -> dict | None:
        deadline = time.monotonic() + wait_s
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._poll.poll(max(1, math.ceil(remaining * 1000))):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return None

    def request(self, gold: str, prediction: str, wait_s: float) -> dict | None:
        """The worker's answer, or None when it did not answer within `wait_s` or died."""
        data = memoryview((json.dumps({"gold": gold, "prediction": prediction}) + "\n").encode())
        try:
            while data:
                data = data[os.write(self.process.stdin.fileno(), data) :]
        except OSError:
            return None
        return self._read_line(wait_s)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if os.getpid() != self._owner_pid:
            return  # a forked child's copy: the process belongs to the parent
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                pipe.close()
            except OSError:
                pass


def _close_workers(workers: set) -> None:
    for worker in list(workers):
        worker.close()
    workers.clear()


class MathVerifier:
    """A pool of math-verify worker processes with a per-answer time limit.

    timeout_s: seconds one answer may take (parse both sides + verify), > 0; default 5, as
    math-verify's own default. num_workers: processes, >= 1 (each ~150 MB resident).
    memory_limit_mb: address-space limit per worker in MiB, 0 for none.
    Thread-safe; after `os.fork` the child starts its own workers.
    """

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        num_workers: int = 1,
        memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB,
    ):
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            math.isfinite(timeout_s) and timeout_s > 0
        ):
            raise UserError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise UserError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        if isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, int) or memory_limit_mb < 0:
            raise UserError(f"memory_limit_mb must be an integer >= 0 (0: no limit), got {memory_limit_mb!r}")
        self.timeout_s = float(timeout_s)
        self.num_workers = num_workers
        self.memory_limit_mb = memory_limit_mb
        self.timeouts = 0
        self.restarts = 0
        self._live: set[_Worker] = set()
        self._finalizer = weakref.finalize(self, _close_workers, self._live)
        self._reset_pool()

    def _reset_pool(self) -> None:
        self._owner_pid = os.getpid()
        self._stats_lock = threading.Lock()
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(self.num_workers):
            self._idle.put(None)

    def _take(self) -> _Worker | None:
        if os.getpid() != self._owner_pid:
            # A forked child shares the parent's pipes; talking on them would interleave
            # two conversations with one worker. Forget them (they are the parent's to close).
            self._live = set()
            self._reset_pool()
        return self._idle.get()

    def check(self, gold: str, prediction: str) -> str:
        """One of STATUSES for `prediction` (a completion) against `gold` (the reference
        answer, without `\\boxed{}`). Raises MathVerifyUnavailable if no worker can start."""
        worker = self._take()
        try:
            if worker is None or not worker.alive():
                if worker is not None:
                    self._discard(worker)
                worker = _Worker(self.timeout_s, self.memory_limit_mb)
                self._live.add(worker)
            reply = worker.request(gold, prediction, self.timeout_s + GRACE_S)
            if reply is None:
                status = TIMEOUT if worker.alive() else ERROR
                self._discard(worker)
                worker = None
                with self._stats_lock:
                    self.restarts += 1
            else:
                status = reply.get("status", ERROR)
            if status == TIMEOUT:
                with self._stats_lock:
                    self.timeouts += 1
            return status if status in STATUSES else ERROR
        finally:
            self._idle.put(worker)

    def _discard(self, worker: _Worker) -> None:
        self._live.discard(worker)
        worker.close()

    def check_batch(self, golds: Sequence[str], predictions: Sequence[str]) -> list[str]:
        """`check` over pairs, in order, using all `num_workers` workers at once."""
        if len(golds) != len(predictions):
            raise UserError(f"golds ({len(golds)}) and predictions ({len(predictions)}) differ in length")
        if self.num_workers == 1 or len(golds) <= 1:
            return [self.check(g, p) for g, p in zip(golds, predictions)]
        with ThreadPoolExecutor(max_workers=self.num_workers) as pool:
            return list(pool.map(self.check, golds, predictions))

    def close(self) -> None:
        """Stop every worker now (they also stop when this object is collected or at exit)."""
        _close_workers(self._live)
        self._reset_pool()


_shared: MathVerifier | None = None
_shared_lock = threading.Lock()


def shared_verifier() -> MathVerifier:
    """The process-wide verifier the math rewards use (created on first use: 1 worker, 5 s)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MathVerifier()
        return _shared


def configure_shared_verifier(
    *, timeout_s: float = DEFAULT_TIMEOUT_S, num_workers: int = 1, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB
) -> MathVerifier:
    """Replace the process-wide verifier (e.g. `num_workers=8` in a math environment actor)."""
    global _shared
    replacement = MathVerifier(timeout_s=timeout_s, num_workers=num_workers, memory_limit_mb=memory_limit_mb)
    with _shared_lock:
        previous, _shared = _shared, replacement
    if previous is not None:
        previous.close()
    return replacement
