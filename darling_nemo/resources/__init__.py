"""The public data shipped inside the package (provenance and licences: README.md here)."""

from __future__ import annotations

from pathlib import Path

RESOURCES_DIR = Path(__file__).resolve().parent


def resource_path(relative: str) -> Path:
    """The path of a shipped file, e.g. "math_eval/aime25.jsonl"; an unknown name is an error."""
    path = RESOURCES_DIR / relative
    if not path.is_file():
        shipped = sorted(str(p.relative_to(RESOURCES_DIR)) for p in RESOURCES_DIR.rglob("*.jsonl"))
        raise FileNotFoundError(
            f"{relative!r} is not a file shipped in {RESOURCES_DIR}; shipped: {', '.join(shipped)}"
        )
    return path
