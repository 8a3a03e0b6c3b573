"""A checkpoint that proves it is whole before a resume trusts it.

Every checkpoint the package writes (a TRL run's `checkpoint-N` and `final`, the miniature's
`warm_start`, a classifier run's `checkpoint-last`) ends with `manifest.json`: each file's
relative path, size and sha256, written LAST, inside the staged folder, before the rename
that publishes it. `check(folder)` reads it back: a missing file, another size or another
hash is named, in words. A folder from an earlier version has no manifest: its files'
structure is checked instead (a safetensors file as long as its header says, a torch zip
with its closing directory, JSON that parses), which catches a truncated file, not a
flipped bit. `set_aside(folder)` moves a damaged folder out of the way, never deleting it,
under a name no rotation or resume globs for (`damaged-<name>-<time>`).

Only the standard library is imported here.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
_CHUNK = 1 << 20
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since torch 1.6


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: str | Path) -> None:
    """Record every file under `folder` (path relative to it, size, sha256) in
    `folder/manifest.json`: call it after the last other file is written."""
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": sha256_of(p)}
        for p in _files(folder)
    }
    tmp = folder / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"format": 1, "files": files}, indent=1) + "\n")
    os.replace(tmp, folder / MANIFEST)


@dataclass(frozen=True)
class Verdict:
    problem: str | None  # what is wrong, in words (None: intact)
    legacy: bool  # no manifest: only the files' structure was checked


def check(folder: str | Path) -> Verdict:
    """Whether `folder` holds what its manifest records (or, without one, files whose
    structure is whole)."""
    folder = Path(folder)
    if not folder.is_dir():
        return Verdict(f"{folder.name} is not a folder", legacy=False)
    path = folder / MANIFEST
    if not path.is_file():
        return Verdict(_structure_problem(folder), legacy=True)
    try:
        recorded = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return Verdict(f"{MANIFEST} is unreadable", legacy=False)
    for name, entry in sorted(recorded.items()):
        file = folder / name
        if not file.is_file():
            return Verdict(f"{name} is missing", legacy=False)
        size = file.stat().st_size
        if size != entry["size"]:
            return Verdict(f"{name}: {size} bytes, manifest says {entry['size']}", legacy=False)
        if sha256_of(file) != entry["sha256"]:
            return Verdict(f"{name}: contents differ from the manifest's sha256", legacy=False)
    return Verdict(None, legacy=False)


def _structure_problem(folder: Path) -> str | None:
    """The first file under `folder` whose structure is not whole, in words (no manifest)."""
    files = _files(folder)
    if not files:
        return "it holds no files"
    for file in files:
        problem = _file_problem(file)
        if problem:
            return f"{file.relative_to(folder).as_posix()}: {problem}"
    return None


def _file_problem(file: Path) -> str | None:
    size = file.stat().st_size
    if file.suffix == ".safetensors":
        return _safetensors_problem(file, size)
    if file.suffix == ".json":
        try:
            json.loads(file.read_bytes())
        except ValueError:
            return "not valid JSON (cut short?)"
        return None
    with file.open("rb") as stream:
        zipped = stream.read(4) == _ZIP_MAGIC
    if zipped and not zipfile.is_zipfile(file):
        return f"{size} bytes, a torch file cut short (no zip directory at its end)"
    return None


def _safetensors_problem(file: Path, size: int) -> str | None:
    with file.open("rb") as stream:
        head = stream.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a safetensors header"
        (header_length,) = struct.unpack("<Q", head)
        if header_length > size - 8:
            return f"{size} bytes, its header alone says {header_length + 8}"
        try:
            header = json.loads(stream.read(header_length))
        except ValueError:
            return "its safetensors header is not valid JSON"
    ends = [
        entry["data_offsets"][1]
        for key, entry in header.items()
        if key != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry
    ]
    expected = 8 + header_length + max(ends, default=0)
    if size != expected:
        return f"{size} bytes, its safetensors header says {expected}"
    return None


def set_aside(folder: Path) -> Path:
    """Rename a damaged `folder` to `damaged-<name>-<time>` beside it (never deleted); the
    name starts otherwise than `checkpoint-`, so neither a resume nor transformers'
    save_total_limit rotation takes it for a checkpoint."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = folder.with_name(f"damaged-{folder.name}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = folder.with_name(f"damaged-{folder.name}-{stamp}-{n}")
    folder.rename(target)
    return target


def damaged_words(folder: Path, problem: str) -> str:
    """Move a damaged `folder` aside; the words that say so."""
    aside = set_aside(folder)
    return f"{folder.name} is damaged ({problem}); moved aside to {aside.name}"
