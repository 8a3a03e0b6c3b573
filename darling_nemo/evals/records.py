"""JSONL records that let every evaluation resume where it stopped.

Each evaluation appends one JSON line per finished item (flushed at once) and, on restart,
reads the file back and skips the items already there. A run killed mid-write leaves a
partial last line: it is cut off with a warning. A bad line anywhere else is an error that
names the file and line, because silently skipping it would drop an item.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from darling_nemo.jsonl import decode_json_line, read_jsonl_numbered
from darling_nemo.resume import changed_settings, write_json
from darling_nemo.schema import ConfigError


def read_jsonl(path: str | Path, repair: bool = True) -> list[dict[str, Any]]:
    """All records of a JSONL file ([] if it does not exist).

    A torn last line is cut off the file when `repair` (the caller is about to append to
    it), else only skipped (another process may still be writing that file).
    """
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    records = []
    offset = 0
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        if line.strip():
            record, problem = decode_json_line(line)
            if problem is not None:
                if last:  # no newline after it: the write was interrupted (or is under way)
                    if repair:
                        warnings.warn(
                            f"{path}:{number}: dropping a partial last line (interrupted write)",
                            stacklevel=2,
                        )
                        with path.open("r+b") as fh:
                            fh.truncate(offset)
                    break
                raise ValueError(f"{path}:{number}: {problem}")
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object per line")
            records.append(record)
        offset += len(line) + 1
    return records


def latest_by_key(records: Iterable[dict[str, Any]], key: str) -> dict[Hashable, dict]:
    """Index records by `record[key]`; a later record supersedes an earlier one."""
    out: dict[Hashable, dict] = {}
    for record in records:
        value = record[key]
        out[tuple(value) if isinstance(value, list) else value] = record
    return out


def latest_records(path: str | Path, key: str, repair: bool = True) -> dict[Hashable, dict]:
    """A resumable JSONL file's records by `record[key]`, the last line of each key winning."""
    return latest_by_key(read_jsonl(path, repair=repair), key)


class JsonlWriter:
    """Append records, one line each, flushed so a crash loses at most the line being written."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_resume(output_dir: str | Path, stage: str, settings: dict[str, Any]) -> None:
    """Refuse to resume into an output_dir written with different result-changing settings.

    `settings` (JSON-able) is stored in output_dir/resume.json under `stage` on the first
    run; later runs must match it key by key.
    """
    path = Path(output_dir) / "resume.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    settings = json.loads(json.dumps(settings))  # tuples -> lists, as they come back
    if stage in stored:
        changed = changed_settings(stored[stage], settings)
        if changed:
            details = "; ".join(changed)
            raise ConfigError(
                f"{output_dir} holds {stage} results made with other settings ({details}). "
                "Use a new output_dir, or delete the old results to start over."
            )
        return
    stored[stage] = settings
    write_json(path, stored)


def load_prompts(
    path: str, prompt_key: str, id_key: str, limit: int | None
) -> list[dict[str, str]]:
    """[{id, prompt}] from a JSONL file, first `limit` rows."""
    file = Path(path)
    try:
        numbered = read_jsonl_numbered(file)
    except FileNotFoundError:
        raise ConfigError(f"prompts file not found: {file}") from None
    except ValueError as err:  # every bad line, as file:line
        raise ConfigError(str(err)) from None
    rows, seen = [], set()
    for number, row in numbered:
        for key, what in ((prompt_key, "prompt_key"), (id_key, "id_key")):
            if key not in row:
                raise ConfigError(
                    f"{file}:{number}: no field {key!r} (set {what}); has {sorted(row)}"
                )
        pid = str(row[id_key])
        if pid in seen:
            raise ConfigError(f"{file}:{number}: duplicate id {pid!r}")
        seen.add(pid)
        rows.append({"id": pid, "prompt": str(row[prompt_key])})
        if limit is not None and len(rows) == limit:
            break
    return rows
