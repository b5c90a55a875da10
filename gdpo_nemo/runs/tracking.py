"""The one metrics sink of both engines: `metrics.jsonl` always, W&B when enabled.

`metrics.jsonl` holds one JSON object per logged step, ``{"step": N, "<key>": value, ...}``,
appended and flushed line by line, so a killed run loses at most the step in flight. It is
the source of truth the analysis reads; W&B mirrors it.

W&B mode (`wandb_mode`):
- ``online`` when ``WANDB_API_KEY`` is set (or ``WANDB_MODE=online``). When the server
  cannot be reached (compute nodes without a network), start-up gives up after
  ONLINE_INIT_TIMEOUT_S (env ``GDPO_NEMO_WANDB_INIT_TIMEOUT``; a server that refuses or does
  not answer one plain request, `wandb_server_problem`, is known at once) and the run logs offline
  instead, saying so and how to upload it; with ``WANDB_MODE=online`` (the user asked for
  online only) it stops with one line instead (`WandbUnavailable`, a ValueError).
- ``offline`` without a key: the run is written under ``<run_dir>/wandb/`` and can be
  uploaded later with ``wandb sync <run_dir>/wandb/offline-run-*``; the folder and that
  command are printed whenever a run logs offline,
- ``disabled`` when ``logger.wandb_enabled`` is false (or ``WANDB_MODE=disabled``).
The W&B run id is kept in ``<run_dir>/wandb_id`` so a resumed run continues the same W&B run.

Resuming: `Tracker(..., resume_step=N)` first moves every line of `metrics.jsonl` whose step
is after N (the checkpoint the run resumes from) into a file of its own beside it
(`rundir.split_metrics`), so steps are never logged twice and no record is lost. A fresh
Tracker never empties an existing `metrics.jsonl`: it moves it into ``replaced/<time>/``
first (`rundir.move_aside`); the commands refuse a run dir that holds a
run unless told `--resume` or `--overwrite`.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs.rundir import METRICS_FILE, WANDB_ID_FILE, metrics_path, move_aside, split_metrics, wandb_dir


ONLINE_INIT_TIMEOUT_S = 20.0
INIT_TIMEOUT_ENV = "GDPO_NEMO_WANDB_INIT_TIMEOUT"


class WandbUnavailable(UserError):
    """W&B was asked to run online only (WANDB_MODE=online) and its server cannot be reached."""


def online_init_timeout() -> float:
    """Seconds an online W&B start-up may take before the run logs offline instead."""
    text = os.environ.get(INIT_TIMEOUT_ENV, "")
    try:
        value = float(text) if text else ONLINE_INIT_TIMEOUT_S
    except ValueError:
        raise UserError(f"{INIT_TIMEOUT_ENV}={text!r} must be a number of seconds") from None
    return value if value > 0 else ONLINE_INIT_TIMEOUT_S


def wandb_server_problem(timeout: float) -> str | None:
    """Why W&B's server (``WANDB_BASE_URL``, else api.wandb.ai) does not answer one plain HTTP
    request within `timeout` seconds, or None when it answers (any HTTP status counts).

    Asked before W&B's own client is used online: that client retries a refused or silent
    server through its service process for minutes, whatever timeout it is given, where this
    answers in one connection attempt."""
    import urllib.error
    import urllib.request

    base = (os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").strip().rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=max(0.5, timeout)):
            return None
    except urllib.error.HTTPError:
        return None  # the server answered, with a status of its own
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        return f"W&B server {base} does not answer: {reason}"


def _going_offline(err: Exception, log) -> None:
    """An online W&B start-up failed with `err`: raise WandbUnavailable (one line) when
    WANDB_MODE=online asks for online only, else say that the run logs offline instead."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if os.environ.get("WANDB_MODE", "").strip().lower() == "online":
        raise WandbUnavailable(
            f"W&B could not start online ({reason}) and WANDB_MODE=online asks for online only: unset "
            "WANDB_MODE to log offline and upload later, or check the network and WANDB_API_KEY"
        ) from None
    log(f"W&B: could not start online ({reason}); logging offline instead")


def settle_external_wandb(enabled: bool, log_dir, log=None) -> str:
    """For a W&B logger that is not ours (NeMo RL's, which calls ``wandb.init`` itself with
    W&B's own 90 s retries, then fails): when W&B would run online, ask its server whether
    it answers (``wandb.Api().viewer``, within `online_init_timeout`); when it does not, set
    ``WANDB_MODE=offline`` in this process's environment for that logger, and say so with the
    folder and the ``wandb sync`` command; with ``WANDB_MODE=online``, raise
    WandbUnavailable (one line) instead. Whenever the mode is offline (no key, or no server),
    ``WANDB_MODE=offline`` is set, so that logger never tries to log in. Returns the mode the
    logger will use."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    mode = wandb_mode(enabled)
    if mode == "online":
        try:
            timeout = online_init_timeout()
            problem = wandb_server_problem(timeout)
            if problem:
                raise ConnectionError(problem)
            import wandb

            wandb.Api(timeout=max(1, int(timeout))).viewer  # noqa: B018 (the request is the check)
        except Exception as err:
            _going_offline(err, log)
            os.environ["WANDB_MODE"] = mode = "offline"
    if mode == "offline":
        # That logger calls wandb.init without a mode: with no key W&B would try to log in and
        # fail ("No API key configured"), so the mode chosen here is handed to it explicitly.
        os.environ["WANDB_MODE"] = "offline"
        # NeMo RL puts W&B's folder a few levels down (an experiment folder, wandb/wandb/).
        log(f"W&B: offline run under {log_dir}; upload it with: wandb sync $(find {log_dir} -type d -name 'offline-run-*')")
    return mode


def fail_external_wandb() -> bool:
    """End the W&B run that a logger not ours (NeMo RL's) started in this process as failed
    (exit code 1), so its files and the server call it crashed, not finished: W&B's own exit
    hook records exit code 0 whatever ended the process. True when there was such a run."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return False
    run.finish(exit_code=1)
    return True


def wandb_mode(enabled: bool) -> str:
    """The W&B mode for `logger.wandb_enabled` and the environment (module docstring)."""
    if not enabled:
        return "disabled"
    forced = os.environ.get("WANDB_MODE", "").strip().lower()
    if forced in ("disabled", "offline", "online"):
        return forced
    if forced == "dryrun":
        return "offline"
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def _plain(value):
    """A JSON-safe float/int/str; NaN and inf become null (JSON has no NaN)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    value = float(value)
    return value if math.isfinite(value) else None


class Tracker:
    """Log metrics of one run to `<run_dir>/metrics.jsonl` and (optionally) W&B.

    Args:
        run_dir: the run directory (created if missing).
        config: the resolved run config, stored as the W&B run config.
        name, group: W&B run name and group (the run id's `.name` and `.group`).
        project, entity: W&B project and entity (`logger.wandb.*`).
        wandb_enabled: `logger.wandb_enabled`.
        resume_step: when resuming from the checkpoint of step N: keep metrics up to N (the
            rest set aside). None starts a fresh `metrics.jsonl` (an earlier one, with the
            rest of the earlier run, is moved into ``replaced/<time>/``).
    """

    def __init__(self, run_dir, *, config: dict | None = None, name: str = "run", group: str | None = None,
                 project: str = "gdpo-nemo", entity: str | None = None, wandb_enabled: bool = False,
                 resume_step: int | None = None, log=None):
        self.run_dir = Path(run_dir)
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = metrics_path(self.run_dir)
        if resume_step is None:
            if self.path.exists() and self.path.stat().st_size:
                move_aside(self.run_dir, [METRICS_FILE])
            self.path.touch()
        else:
            split_metrics(self.run_dir, resume_step)
        self._file = open(self.path, "a")
        self.mode = wandb_mode(wandb_enabled)
        self._wandb_run = None
        if self.mode != "disabled":
            self._wandb_run = self._start_wandb(config, name, group, project, entity, resume_step is not None)

    def _start_wandb(self, config, name, group, project, entity, resuming: bool):
        import wandb

        id_file = self.run_dir / WANDB_ID_FILE
        if resuming and id_file.exists():
            run_id = id_file.read_text().strip()
        else:
            run_id = secrets.token_hex(4)  # W&B run ids: lowercase letters and digits
            id_file.write_text(run_id)
        def start(mode: str, **settings):
            return wandb.init(
                project=project, entity=entity, name=name, group=group, config=config or {}, dir=str(self.run_dir),
                mode=mode, id=run_id, resume="allow", reinit="create_new",
                settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, **settings),
            )

        if self.mode == "online":
            timeout = online_init_timeout()
            problem = wandb_server_problem(timeout)
            if problem:
                _going_offline(ConnectionError(problem), self._log)
                self.mode = "offline"
            else:
                try:
                    return start("online", init_timeout=timeout)
                except Exception as err:  # CommError, UsageError (bad key), timeouts: all mean "not online"
                    _going_offline(err, self._log)
                    self.mode = "offline"
                    # The failed start keeps the run id in W&B's service: start that afresh.
                    wandb.teardown()
        run = start(self.mode)
        if self.mode == "offline":
            folder = Path(run.settings.sync_dir) if getattr(run.settings, "sync_dir", None) else self.wandb_dir
            self._log(f"W&B: offline run in {folder}; upload it with: wandb sync {folder}")
        return run

    @property
    def wandb_dir(self) -> Path:
        return wandb_dir(self.run_dir)

    def log(self, metrics: dict, step: int) -> dict:
        """Append one record `{"step": step, **metrics}` and mirror it to W&B.
        Returns the record as written (plain JSON values)."""
        record = {"step": int(step)}
        record.update({key: _plain(value) for key, value in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._wandb_run is not None:
            self._wandb_run.log({k: v for k, v in record.items() if k != "step" and v is not None}, step=int(step))
        return record

    def close(self, *, exit_code: int = 0) -> None:
        if not self._file.closed:
            self._file.close()
        if self._wandb_run is not None:
            run, self._wandb_run = self._wandb_run, None
            sync_file = run.settings.sync_file if self.mode == "offline" else None
            run.finish(exit_code=exit_code)
            if sync_file:
                _wait_for_wandb_exit(Path(sync_file))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(exit_code=0 if exc_type is None else 1)
        return False


# ---------------------------------------------------------------------------------------
# Reading an offline W&B run back (for checks and for analysis without the W&B server).
# ---------------------------------------------------------------------------------------

_WANDB_HEADER = struct.Struct("<4sHB")  # b":W&B", magic 0xBEE1, version
_WANDB_RECORD = struct.Struct("<IHB")  # crc32 (of type + data), length, type
_WANDB_BLOCK = 32 * 1024  # the LevelDB log format W&B's transaction log uses
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def iter_wandb_records(path) -> Iterator[bytes]:
    """The raw protobuf bytes of every complete record of a W&B run file ``run-<id>.wandb``.

    The file is W&B's transaction log: a 7-byte header, then 32 KiB blocks of LevelDB-log
    records (7-byte header: crc32, uint16 length, type 1 full / 2 first / 3 middle / 4 last).
    wandb >= 0.19 ships no Python reader for it, so the framing is decoded here and only the
    message type (``wandb.proto.wandb_internal_pb2.Record``) comes from wandb. Raises
    ValueError naming the file when its header is not W&B's; a record with a bad checksum or
    a torn tail (a run killed mid-write) ends the iteration.
    """
    data = Path(path).read_bytes()
    if len(data) < _WANDB_HEADER.size:
        raise UserError(f"{path}: not a W&B run file (shorter than its header)")
    ident, magic, _version = _WANDB_HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise UserError(f"{path}: not a W&B run file (header {ident!r}, magic {magic:#x})")
    pos, pending = _WANDB_HEADER.size, b""
    while pos < len(data):
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < _WANDB_RECORD.size:
            pos += left  # block trailer padding
            continue
        if pos + _WANDB_RECORD.size > len(data):
            return
        checksum, length, kind = _WANDB_RECORD.unpack_from(data, pos)
        chunk = data[pos + _WANDB_RECORD.size: pos + _WANDB_RECORD.size + length]
        pos += _WANDB_RECORD.size + length
        if kind == 0 and length == 0:
            pos += _WANDB_BLOCK - pos % _WANDB_BLOCK if pos % _WANDB_BLOCK else 0  # zero padding
            continue
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            return
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def _wait_for_wandb_exit(sync_file: Path, timeout: float = 60.0) -> bool:
    """Wait until the offline run file `sync_file` holds its exit record (True), at most
    `timeout` seconds (False, with a warning). W&B's service process writes the file after
    `finish()` returns; a job that ends at once (Slurm, a test reading the file) would
    otherwise find it without its last rows."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if any(m.WhichOneof("record_type") == "exit" for m in iter_wandb_messages(sync_file)):
                return True
        except (OSError, ValueError):
            pass  # not written yet
        if time.monotonic() >= deadline:
            print(f"gdpo_nemo.runs.tracking: warning: {sync_file} has no exit record after {timeout:.0f} s;"
                  " its last rows may be missing", file=sys.stderr)
            return False
        time.sleep(0.1)


def iter_wandb_messages(path) -> Iterator:
    """Every complete record of a W&B run file ``run-<id>.wandb`` as W&B's own protobuf
    message (``wandb.proto.wandb_internal_pb2.Record``; its ``record_type`` says which
    kind: run, config, history, exit, ...). Framing as `iter_wandb_records`."""
    from wandb.proto import wandb_internal_pb2

    for payload in iter_wandb_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        yield record


def wandb_items(items) -> dict:
    """The ``{key: value}`` of a W&B record's items (a history row, a config update): a nested
    key joins with "/", each value is decoded from its JSON (kept as text if it is not JSON)."""
    decoded = {}
    for item in items:
        key = "/".join(item.nested_key) if len(item.nested_key) else item.key
        try:
            decoded[key] = json.loads(item.value_json)
        except ValueError:
            decoded[key] = item.value_json
    return decoded


def read_wandb_history(wandb_file) -> list[dict]:
    """The history rows (`wandb.log` calls) of an offline W&B run file `run-<id>.wandb`,
    decoded with W&B's own protobuf schema: `[{"_step": N, "<key>": value, ...}, ...]`."""
    return [wandb_items(record.history.item) for record in iter_wandb_messages(wandb_file)
            if record.WhichOneof("record_type") == "history"]
