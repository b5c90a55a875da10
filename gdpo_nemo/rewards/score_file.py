"""Score a JSONL file of completions with a task's reward set (`gdpo-nemo score`, whose
flags are gdpo_nemo.commands.score).

Each input row is a JSON object with `completion` and `ground_truth` (code: `tests`, and
`ground_truth` is ignored), optionally `num_tokens` (the completion's length from your
tokenizer; without it `length` counts ceil(characters / 4)). Each output row is the input
plus `"rewards": {name: value}`. A bad row (not JSON, a missing or mistyped field, an
unusable ground truth) is reported on stderr as `line N: what is wrong`, written with every
component at its lowest declared value and an `"error"` field, and never stops the file;
a line that is not a JSON object is written as `{"line": N, "raw": text, ...}`.
Blank lines are skipped, and so is a UTF-8 byte order mark. `score_file` returns the counts
and the mean of each reward over all rows written (the command prints them as its summary
line); it raises ValueError before reading anything when the input is missing or the output
is the input under another name, and ScoringStopped when a code task's sandbox cannot run.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.errors import UserError

CHUNK_ROWS = 256


def default_output_path(input_path: str) -> str:
    """IN.jsonl -> IN.scored.jsonl (any other name gets `.scored.jsonl` appended); stdin -> stdout."""
    if input_path == "-":
        return "-"
    path = Path(input_path)
    stem = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    return str(path.with_name(stem + ".scored.jsonl"))


def _read_rows(stream) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, row, error) per non-blank line; row is None when the line is unusable."""
    for number, raw in enumerate(stream, start=1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte order mark (editors on Windows write one) is not data
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            yield number, None, f"not valid UTF-8 ({err.reason} at byte {err.start})"
            continue
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as err:
            yield number, {"line": number, "raw": text.rstrip("\r\n")}, f"not valid JSON ({err})"
            continue
        if not isinstance(row, dict):
            yield number, {"line": number, "raw": text.rstrip("\r\n")}, f"a row must be a JSON object, got {type(row).__name__}"
            continue
        yield number, row, None


def _row_problem(row: dict, needs_tests: bool) -> str | None:
    """What makes a parsed row unscorable, or None."""
    if "completion" not in row:
        return "missing 'completion'"
    if not isinstance(row["completion"], str):
        return f"'completion' must be a string, got {type(row['completion']).__name__}"
    if needs_tests:
        if "tests" not in row:
            return "missing 'tests'"
    elif "ground_truth" not in row:
        return "missing 'ground_truth'"
    tokens = row.get("num_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        return f"'num_tokens' must be a non-negative integer or null, got {tokens!r}"
    return None


class _Scorer:
    """Scores chunks of rows, isolating the rows whose data cannot be scored."""

    def __init__(self, reward_set):
        self.reward_set = reward_set

    def _batch(self, rows: list[dict]) -> tuple[dict[str, list[float]], dict[int, str]]:
        from gdpo_nemo.rewards import RewardDataError

        try:
            scores = self.reward_set.score_batch(
                [row["completion"] for row in rows],
                [row.get("ground_truth") for row in rows],
                num_tokens=[row.get("num_tokens") for row in rows],
                tests=[row.get("tests") for row in rows] if self.reward_set.needs_tests else None,
            )
            return scores, {}
        except RewardDataError as err:
            return err.partial, err.rows

    def score(self, rows: list[dict]) -> list[tuple[dict[str, float], str | None]]:
        """(rewards, error) per row. Raises only when the sandbox itself is broken
        (SandboxError: no row's fault)."""
        try:
            scores, errors = self._batch(rows)
        except Exception as err:
            if type(err).__name__ == "SandboxError":
                raise
            # A scorer that raises for one row's data (e.g. nesting too deep for Python)
            # would take the chunk down: rescore row by row to pin the error on its row.
            if len(rows) == 1:
                return [(self.reward_set.lowest(), f"cannot score this row: {type(err).__name__}: {str(err)[:500]}")]
            return [result for row in rows for result in self.score([row])]
        results = []
        for index in range(len(rows)):
            rewards = {name: scores[name][index] for name in self.reward_set.names}
            results.append((rewards, errors.get(index)))
        return results


def _dump(row: dict) -> bytes:
    try:
        return json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # lone surrogates from \ud800-style escapes: keep them escaped
        return json.dumps(row, ensure_ascii=True).encode("ascii") + b"\n"
    except (ValueError, RecursionError, MemoryError, TypeError) as err:
        # A row Python can read but not write back (nesting at the limit, ...): keep its
        # rewards and line number, say why the rest is missing.
        kept = {key: row[key] for key in ("line", "rewards", "error") if key in row}
        kept["error"] = (kept.get("error", "") + f"; row not written back ({type(err).__name__})").lstrip("; ")
        return json.dumps(kept, ensure_ascii=True).encode("ascii") + b"\n"


def _same_file(output_path: str, input_path: str) -> bool:
    """Whether writing `output_path` would write the input: the same path, a symlink to it,
    or a hard link of it."""
    if Path(output_path).resolve() == Path(input_path).resolve():
        return True
    try:
        return os.path.samefile(output_path, input_path)
    except OSError:  # the output does not exist yet
        return False


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, "rb") as stream:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b""))


class ScoringStopped(RuntimeError):
    """The file could not be scored to its end for a reason no row is at fault for (a code
    task's sandbox cannot run here); the message says how many rows were written."""


@dataclass(frozen=True)
class ScoreSummary:
    """What one scored file came to: rows written, rows with an error, and the mean of each
    reward component over all rows written ({} when there were none)."""

    rows: int
    bad_rows: int
    means: dict[str, float]


def score_file(reward_set, input_path: str, output_path: str, *, progress: bool = True) -> ScoreSummary:
    """Score every row of `input_path` ('-': stdin) with `reward_set` into `output_path`
    ('-': stdout), `CHUNK_ROWS` rows per batch; each bad row is reported on stderr as
    `line N: what is wrong` and still written (see the module docstring). Raises ValueError
    before anything is read (missing input, output that is the input), ScoringStopped when
    the sandbox breaks midway."""
    from tqdm import tqdm

    if input_path != "-" and not Path(input_path).is_file():
        raise UserError(f"input file {input_path!r} does not exist")
    if output_path != "-" and input_path != "-" and _same_file(output_path, input_path):
        raise UserError(f"output {output_path!r} would overwrite the input; pass another -o")
    scorer = _Scorer(reward_set)
    names = reward_set.names
    totals = {name: 0.0 for name in names}
    rows_done = bad_rows = 0
    source = sys.stdin.buffer if input_path == "-" else open(input_path, "rb")
    sink = sys.stdout.buffer if output_path == "-" else open(output_path, "wb")
    bar = tqdm(total=_count_lines(input_path), unit="row", file=sys.stderr, disable=None if progress else True, desc="score")

    def flush(pending: list[tuple[int, dict, str | None]]) -> None:
        nonlocal rows_done, bad_rows
        good = [(n, row) for n, row, problem in pending if problem is None]
        scored = dict(zip((n for n, _ in good), scorer.score([row for _, row in good]))) if good else {}
        for number, row, problem in pending:
            rewards, error = scored.get(number, (reward_set.lowest(), problem))
            out = dict(row) if row is not None else {"line": number}
            out["rewards"] = rewards
            out.pop("error", None)
            if error is not None:
                out["error"] = error
                bad_rows += 1
                bar.write(f"line {number}: {error}", file=sys.stderr)
            sink.write(_dump(out))
            rows_done += 1
            for name in names:
                totals[name] += rewards[name]
        bar.update(pending[-1][0] - bar.n)

    try:
        pending: list[tuple[int, dict, str | None]] = []
        for number, row, problem in _read_rows(source):
            if problem is None:
                problem = _row_problem(row, reward_set.needs_tests)
            pending.append((number, row, problem))
            if len(pending) >= CHUNK_ROWS:
                flush(pending)
                pending = []
        if pending:
            flush(pending)
    except Exception as err:
        if type(err).__name__ != "SandboxError":
            raise
        raise ScoringStopped(f"the sandbox cannot run programs here ({err}); {rows_done} rows written") from None
    finally:
        bar.close()
        if source is not sys.stdin.buffer:
            source.close()
        if sink is not sys.stdout.buffer:
            sink.close()
        else:
            sink.flush()
    means = {name: totals[name] / rows_done for name in names} if rows_done else {}
    return ScoreSummary(rows_done, bad_rows, means)
