"""Reading input JSON and JSONL files: every line a JSON object, errors name the file and
line and say the whole problem (json's message and column, or the byte that is not UTF-8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def decode_json_line(raw: bytes) -> tuple[Any, str | None]:
    """(value, None) for one line of a JSONL file, or (None, the problem in full words):
    `not valid JSON: Expecting ',' delimiter (column 7)` or
    `not UTF-8 text: byte 0xff at column 3`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text: byte 0x{raw[err.start]:02x} at column {err.start + 1}"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as err:
        return None, f"not valid JSON: {err.msg} (column {err.colno})"


def read_json(path: str | Path) -> Any:
    """A whole JSON file; raises FileNotFoundError naming the path, or ValueError with
    `file:line: not valid JSON: <json's message> (column N)`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text: byte 0x{raw[err.start]:02x}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path}:{err.lineno}: not valid JSON: {err.msg} (column {err.colno})"
        ) from None


def scan_jsonl(
    path: str | Path,
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """(line number, record) of every good line and (line number, problem) of every bad one.

    For readers that check each record further and report every problem, JSON and their
    own, in one error. Blank lines are allowed; raises FileNotFoundError naming the path,
    or ValueError in one line for a JSON array (which would be a bad line per line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if is_json_array(path):
        raise ValueError(
            f"{path} is a JSON array; JSONL wants one object per line "
            "(jq -c '.[]' prints it as JSONL)"
        )
    records, problems = [], []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            record, problem = decode_json_line(line)
            if problem is not None:
                problems.append((lineno, problem))
            elif not isinstance(record, dict):
                problems.append((lineno, "expected a JSON object"))
            else:
                records.append((lineno, record))
    return records, problems


def is_json_array(path: Path) -> bool:
    """Whether the whole file is one JSON array (pretty-printed or on one line): what a JSON
    export gives where JSONL was meant. Read in full only when it starts with `[`."""
    with path.open("rb") as fh:
        start = fh.read(4096).lstrip()
    if not start.startswith(b"["):
        return False
    try:
        return isinstance(json.loads(path.read_bytes()), list)
    except (ValueError, RecursionError):  # not JSON as a whole (UnicodeDecodeError included)
        return False


def read_jsonl_numbered(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every record; raises like read_jsonl."""
    records, problems = scan_jsonl(path)
    if problems:  # one line per bad line; a single one is the whole message
        lines = [f"{path}:{n}: {p}" for n, p in problems]
        raise ValueError(
            lines[0] if len(lines) == 1 else "malformed JSONL:\n  " + "\n  ".join(lines)
        )
    return records


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of an input JSONL file; blank lines are allowed.

    Raises FileNotFoundError naming the path, or ValueError listing every bad line as
    `file:line: problem`, so nothing is silently skipped. (Run outputs that may end in a
    torn line, because a job was killed mid-write, are read by evals.records.read_jsonl.)
    """
    return [record for _, record in read_jsonl_numbered(path)]
