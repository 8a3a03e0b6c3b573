"""What a pydantic config schema says about its keys: the key set of every section, the
allowed values of closed sets, the variant a `kind:` picks.

One reading of the schema serves three users, so none keeps a hand-written copy of it:
strict overrides (`config.apply_overrides`: a key the schema knows may be set although the
YAML does not list it), plain validation messages (`schema.format_validation_error`: key
paths without pydantic's union tags, the allowed values of a closed set) and command-line
choices (`darling-score --judge {lexical,...}`).
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Slot:
    """The declared type of one config value: Optional and Annotated stripped, with the
    discriminator of a tagged union and the default (an instance picks a union's variant)."""

    tp: Any
    discriminator: str | None = None
    default: Any = None


@dataclass(frozen=True)
class KeySpace:
    """The keys one config section may hold.

    `known`: key -> slot of its value. `open`: other keys are legitimate too (a `dict[str, V]`
    field, or a section no schema covers); then `value` is the slot of any such key's value
    (None: unknown). `seed`: what a section created for an override must start with (the
    default variant's tag, so `darling.judge.threshold=...` keeps the default judge).
    """

    known: dict[str, Slot] = field(default_factory=dict)
    open: bool = False
    value: Slot | None = None
    seed: dict[str, Any] = field(default_factory=dict)


FREE = KeySpace(open=True)  # outside any schema: every key may be added with +key=...


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def slot_of(tp: Any, discriminator: str | None = None, default: Any = None) -> Slot:
    """Normalise a type annotation: `X | None` -> X, `Annotated[X, Field(...)]` -> X."""
    while True:
        if get_origin(tp) is Annotated:
            base, *metadata = get_args(tp)
            for meta in metadata:
                if isinstance(meta, FieldInfo) and meta.discriminator:
                    discriminator = str(meta.discriminator)
            tp = base
        elif _is_union(tp) and type(None) in get_args(tp):
            members = [m for m in get_args(tp) if m is not type(None)]
            if len(members) != 1:
                return Slot(Union[tuple(members)], discriminator, default)  # noqa: UP007
            tp = members[0]
        else:
            return Slot(tp, discriminator, default)


def slot_of_field(info: FieldInfo) -> Slot:
    default = None if info.is_required() else info.get_default(call_default_factory=True)
    discriminator = str(info.discriminator) if isinstance(info.discriminator, str) else None
    return slot_of(info.annotation, discriminator, default)


def is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def models_of(slot: Slot) -> list[type[BaseModel]]:
    """The model classes a slot may hold: one for a section, several for a tagged union."""
    if is_model(slot.tp):
        return [slot.tp]
    if _is_union(slot.tp):
        return [m for m in get_args(slot.tp) if is_model(m)]
    return []


def tag_of(model: type[BaseModel], discriminator: str) -> list[str]:
    """The tag value(s) of one variant (its `kind: Literal[...]`)."""
    info = model.model_fields.get(discriminator)
    return [str(v) for v in get_args(info.annotation)] if info else []


def closed_values(slot: Slot) -> list[str] | None:
    """The allowed values of a closed set (Literal, Enum, the tags of a tagged union)."""
    tp = slot.tp
    if get_origin(tp) is Literal:
        return [str(v.value if isinstance(v, enum.Enum) else v) for v in get_args(tp)]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return [str(member.value) for member in tp]
    if slot.discriminator and len(models_of(slot)) > 1:
        return [tag for m in models_of(slot) for tag in tag_of(m, slot.discriminator)]
    return None


def choices(tp: Any) -> list[str]:
    """The closed set of a type alias or annotation, for argparse `choices=`."""
    values = closed_values(slot_of(tp))
    if values is None:
        raise TypeError(f"{tp!r} is not a closed set of values")
    return values


def variant(slot: Slot, tag: Any) -> type[BaseModel] | None:
    """The variant of a tagged union that `tag` names, or None."""
    if slot.discriminator is None:
        return None
    for model in models_of(slot):
        if str(tag) in tag_of(model, slot.discriminator):
            return model
    return None


def resolved_models(slot: Slot, node: Any) -> list[type[BaseModel]]:
    """The model(s) a section's keys come from: a tagged union's variant named by the
    section's tag, else by the default's; all variants when neither says."""
    models = models_of(slot)
    if len(models) <= 1 or slot.discriminator is None:
        return models
    if isinstance(node, Mapping) and slot.discriminator in node:
        chosen = variant(slot, node[slot.discriminator])
        return [chosen] if chosen else models
    if isinstance(slot.default, BaseModel):
        return [type(slot.default)]
    return models


def key_space(slot: Slot | None, node: Any = None) -> KeySpace:
    """The keys a section of this slot may hold (`node`: the section as it stands)."""
    if slot is None:
        return FREE
    models = resolved_models(slot, node)
    if models:
        known = {
            name: slot_of_field(info)
            for model in models
            for name, info in model.model_fields.items()
        }
        tag_missing = not (isinstance(node, Mapping) and slot.discriminator in node)
        default_tag = (
            slot.discriminator
            and len(models_of(slot)) > 1
            and tag_missing
            and isinstance(slot.default, BaseModel)
        )
        seed = (
            {slot.discriminator: getattr(slot.default, slot.discriminator)} if default_tag else {}
        )
        return KeySpace(known=known, seed=seed)
    if get_origin(slot.tp) in (dict, Mapping):
        args = get_args(slot.tp)
        value = slot_of(args[1]) if len(args) == 2 and args[1] is not Any else None
        return KeySpace(open=True, value=value)
    return FREE


def sections_space(sections: Mapping[str, type[BaseModel]]) -> KeySpace:
    """A config only some of whose top-level sections have a schema (NeMo-RL's: `darling:`)."""
    return KeySpace(known={name: Slot(model) for name, model in sections.items()}, open=True)


def child_slot(space: KeySpace, key: str) -> Slot | None:
    return space.known.get(key, space.value if space.open else None)
