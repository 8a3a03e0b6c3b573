"""Reading input JSONL files: every line a JSON object, errors name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of an input JSONL file; blank lines are allowed.

    Raises FileNotFoundError naming the path, or ValueError listing every bad line as
    `file:line: problem`, so nothing is silently skipped. (Run outputs that may end in a
    torn line, because a job was killed mid-write, are read by evals.records.read_jsonl.)
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
                problems.append(f"{path}:{lineno}: not valid JSON ({err.msg})")
                continue
            if not isinstance(record, dict):
                problems.append(f"{path}:{lineno}: expected a JSON object")
                continue
            records.append(record)
    if problems:
        raise ValueError("malformed JSONL:\n  " + "\n  ".join(problems))
    return records
