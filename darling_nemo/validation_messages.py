"""Pydantic validation errors as plain sentences: `key.path: problem`, never pydantic's
wording ("Input tag ... found using ...", "Extra inputs are not permitted")."""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel

from darling_nemo.schema_keys import (
    Slot,
    closed_values,
    key_space,
    models_of,
    slot_of,
    variant,
)

_TYPE_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "string": "text",
    "list": "a list",
    "tuple": "a list",
    "dict": "a section of keys (a mapping)",
    "model": "a section of keys (a mapping)",
    "model_attributes": "a section of keys (a mapping)",
}
_BOUNDS = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}


def _shown(value: Any, limit: int = 60) -> str:
    """A value as the YAML that gave it: null, true, 'text'."""
    text = (
        {None: "null", True: "true", False: "false"}.get(value, repr(value))
        if isinstance(value, bool | None)
        else repr(value)
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _join(values: list[str]) -> str:
    return ", ".join(values)


def _walk(
    loc: tuple[int | str, ...], prefix: str, model: type[BaseModel] | None
) -> tuple[list[str], Slot | None, Slot | None, Any]:
    """(key path parts, slot of the value at loc, slot of its section, the key's last part).

    Pydantic puts a tagged union's tag into loc (`judge.cross_encoder.template`); the tag is
    not a key, so it is dropped here. List indices become `[i]` on the previous part.
    """
    parts = [prefix] if prefix else []
    slot = Slot(model) if model is not None else None
    parent: Slot | None = None
    for item in loc:
        chosen = variant(slot, item) if slot is not None else None
        if chosen is not None:  # the tag pydantic adds after a tagged union's key
            slot = Slot(chosen)
            continue
        parent = slot
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}]"]
            args = getattr(slot.tp, "__args__", ()) if slot else ()
            slot = slot_of(args[0]) if args else None
            continue
        if slot is not None and not models_of(slot) and "[" in str(item):
            continue  # pydantic's name of a plain union member (`function-after[...]`)
        parts.append(str(item))
        slot = key_space(slot).known.get(str(item)) if slot is not None else None
        if slot is None and parent is not None:
            slot = key_space(parent).value
    return parts, slot, parent, loc[-1] if loc else None


def _unknown_key(parts: list[str], parent: Slot | None, error: dict[str, Any]) -> str:
    known = sorted(key_space(parent, error.get("input")).known) if parent else []
    close = difflib.get_close_matches(parts[-1], known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {'.'.join([*parts[:-1], close[0]])!r}?"
    return f"unknown key (allowed here: {_join(known)})" if known else "unknown key"


def _problem(error: dict[str, Any], slot: Slot | None) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in ("literal_error", "enum"):
        allowed = closed_values(slot) if slot else None
        allowed = allowed or re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"{_shown(value)} is not one of {_join(allowed)}"
    if kind == "missing":
        allowed = closed_values(slot) if slot else None
        return "missing (required" + (f"; one of {_join(allowed)})" if allowed else ")")
    if kind in _BOUNDS:
        name, sign = _BOUNDS[kind]
        return f"must be {sign} {ctx.get(name)}, got {_shown(value)}"
    if kind in ("too_short", "too_long"):
        bound = ctx.get("min_length" if kind == "too_short" else "max_length")
        least = "at least" if kind == "too_short" else "at most"
        return f"needs {least} {bound} item(s), got {ctx.get('actual_length')}"
    if kind in ("value_error", "assertion_error"):
        return re.sub(r"^(Value error|Assertion failed), ", "", error["msg"])
    noun = re.sub(r"_(type|parsing|from_float|fraction)$", "", kind)
    if noun in _TYPE_WORDS:
        hint = ""
        if slot is not None and slot.discriminator and closed_values(slot):
            hint = f" (e.g. {{{slot.discriminator}: {closed_values(slot)[0]}}})"
        return f"must be {_TYPE_WORDS[noun]}, got {_shown(value)}{hint}"
    return re.sub(r"^Input should be", "must be", error["msg"]) + f", got {_shown(value)}"


def describe_error(
    error: dict[str, Any], prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """One pydantic error (an item of `ValidationError.errors()`) as `key.path: problem`."""
    parts, slot, parent, _ = _walk(tuple(error["loc"]), prefix, model)
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tag_key = str(ctx.get("discriminator", "kind")).strip("'")
        parts.append(tag_key)
        allowed = closed_values(slot) if slot else None
        allowed = allowed or re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        problem = (
            f"{_shown(ctx.get('tag'))} is not one of {_join(allowed)}"
            if kind == "union_tag_invalid"
            else f"missing (one of {_join(allowed)})"
        )
    elif kind == "extra_forbidden":
        problem = _unknown_key(parts, parent, error)
    else:
        problem = _problem(error, slot)
    path = ".".join(parts)
    return f"{path}: {problem}" if path else problem
