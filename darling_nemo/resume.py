"""Continuing a run safely: which saved settings changed, and files a kill cannot tear.

Everything that reuses saved work (a TRL run directory, the miniature's warm start, an
evaluation's records, a classifier checkpoint) first compares the settings it was made with
against the new ones and refuses to continue when a result-changing one differs, naming its
key path. `changed_settings` is that comparison, once; each caller says which keys may
change and words the refusal for its own output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

UNSET = "<unset>"  # how a key present on one side only is shown


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}. Lists and empty mappings are values (an empty mapping
    stays a setting of its own, so `{}` and a missing key differ)."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flat_settings(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def changed_settings(
    saved: Mapping[str, Any], new: Mapping[str, Any], may_change: Collection[str] = ()
) -> list[str]:
    """One line `key.path: old -> new` per setting that differs between two nested configs,
    sorted by key path.

    A key on one side only shows as <unset> on the other; the key paths in `may_change` (and
    everything under them) are not compared. Both sides are compared as JSON would store
    them (a tuple equals the list it is saved as).
    """
    before = flat_settings(json.loads(json.dumps(saved)))
    after = flat_settings(json.loads(json.dumps(new)))

    def may_differ(path: str) -> bool:
        return any(path == key or path.startswith(f"{key}.") for key in may_change)

    def show(flat: Mapping[str, Any], path: str) -> str:
        return repr(flat[path]) if path in flat else UNSET

    return [
        f"{path}: {show(before, path)} -> {show(after, path)}"
        for path in sorted(before.keys() | after.keys())
        if not may_differ(path)
        and (path not in before or path not in after or before[path] != after[path])
    ]


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write a file through a temporary one and a rename: a reader (or a run resumed after a
    kill) sees the old file or the new one, never half of one. The temporary name carries
    the process id, so processes writing the same file at once do not collide."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
    except BaseException:  # a full disk or a kill: no half temporary file is left either
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def write_json(path: str | Path, obj: Any) -> None:
    """`obj` as indented JSON (UTF-8 kept as is), written atomically."""
    write_text_atomically(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
