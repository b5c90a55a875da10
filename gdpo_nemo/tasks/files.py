"""Reading the real datasets' local files: parquet, JSON Lines, or a JSON list of rows.

Rows come back as plain Python dicts (parquet through pyarrow's `to_pylist`, so nested
columns such as ToolRL's `prompt` list and `reward_model` struct stay lists and dicts).
Every error is a ValueError that names the file, and the row and column when it is about
one.
"""

from __future__ import annotations

import json
from pathlib import Path

from gdpo_nemo.errors import UserError

EXTENSIONS = (".parquet", ".jsonl", ".json")
# File stems a folder may hold for each split (ToolRL and GSM8K ship `test` files).
SPLIT_STEMS = {"train": ("train",), "validation": ("validation", "test", "val")}


def split_file(path, split: str) -> Path:
    """The data file for `split`: `path` itself when it is a file, else the first of
    `<stem><ext>` inside the folder `path` (stems from SPLIT_STEMS, extensions from
    EXTENSIONS)."""
    path = Path(path)
    if path.is_dir():
        candidates = [path / f"{stem}{ext}" for stem in SPLIT_STEMS[split] for ext in EXTENSIONS]
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        raise UserError(
            f"{path}: folder has no {split} file; looked for {[c.name for c in candidates]}"
        )
    if not path.is_file():
        raise UserError(f"{path}: no such data file (give a {'/'.join(EXTENSIONS)} file or a folder of split files)")
    return path


def read_records(path) -> list:
    """All rows of a .parquet, .jsonl or .json (a list of objects) file as dicts."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such data file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow raises several types for a damaged file
            raise UserError(f"{path}: not a readable parquet file ({err})") from err
    if suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise UserError(f"{path}, line {line_number}: not valid JSON ({err.msg})") from err
                if not isinstance(row, dict):
                    raise UserError(f"{path}, line {line_number}: expected a JSON object, got {type(row).__name__}")
                rows.append(row)
        return rows
    if suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise UserError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from err
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise UserError(f"{path}: a .json data file must hold a list of objects (one per row)")
        return rows
    raise UserError(f"{path}: unsupported file type {suffix!r}; use one of {list(EXTENSIONS)}")


def column(record: dict, name: str, where: str):
    """The value of column `name` in one row. A dotted name (`reward_model.ground_truth`)
    looks inside nested objects, or takes a flat column of that exact name. A missing
    column raises ValueError naming `where` (file and row) and the columns present."""
    if name in record:
        return record[name]
    value = record
    for part in name.split("."):
        if isinstance(value, str) and value.lstrip().startswith("{"):
            # Some exports store nested objects as JSON text.
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        if not isinstance(value, dict) or part not in value:
            raise UserError(f"{where}: missing column {name!r} (columns present: {sorted(record)})")
        value = value[part]
    return value


def text_column(record: dict, name: str, where: str) -> str:
    """Column `name` of one row, which must be a string (ValueError naming it otherwise)."""
    value = column(record, name, where)
    if not isinstance(value, str):
        raise UserError(f"{where}: column {name!r} must be text, got {type(value).__name__}")
    return value


def chat_column(record: dict, name: str, where: str) -> list:
    """Column `name` of one row as chat messages `[{"role", "content"}]` with system and
    user roles (ToolRL's and Eurus-2-RL's `prompt` column)."""
    value = column(record, name, where)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise UserError(f"{where}: column {name!r} is text but not a JSON list of messages") from err
    if not isinstance(value, (list, tuple)) or not value:
        raise UserError(f"{where}: column {name!r} must be a non-empty list of chat messages")
    messages = []
    for message in value:
        if (
            not isinstance(message, dict)
            or message.get("role") not in ("system", "user", "assistant")
            or not isinstance(message.get("content"), str)
        ):
            raise UserError(
                f"{where}: column {name!r} holds {message!r}; each message needs role"
                " 'system', 'user' or 'assistant' and text content"
            )
        messages.append({"role": message["role"], "content": message["content"]})
    return messages
