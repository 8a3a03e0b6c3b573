"""Reading input JSONL files: every line a JSON object, errors name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def scan_jsonl(
    path: str | Path,
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """(line number, record) of every good line and (line number, problem) of every bad one.

    For readers that check each record further and report every problem, JSON and their
    own, in one error. Blank lines are allowed; raises FileNotFoundError naming the path.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    records, problems = [], []
    with path.open() as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                problems.append((lineno, f"not valid JSON ({err.msg})"))
                continue
            if not isinstance(record, dict):
                problems.append((lineno, "expected a JSON object"))
                continue
            records.append((lineno, record))
    return records, problems


def read_jsonl_numbered(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every record; raises like read_jsonl."""
    records, problems = scan_jsonl(path)
    if problems:
        raise ValueError(
            "malformed JSONL:\n  " + "\n  ".join(f"{path}:{n}: {p}" for n, p in problems)
        )
    return records


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of an input JSONL file; blank lines are allowed.

    Raises FileNotFoundError naming the path, or ValueError listing every bad line as
    `file:line: problem`, so nothing is silently skipped. (Run outputs that may end in a
    torn line, because a job was killed mid-write, are read by evals.records.read_jsonl.)
    """
    return [record for _, record in read_jsonl_numbered(path)]
