"""The registry of diversity methods and fusions: the one place a method's name is looked up.

`methods/__init__.py` registers the built-in ones; a new method is one module and one
`register_method` line there (tests/core/test_methods_registry.py adds a toy one from a
test). The config schema reads the registry once, when `darling_nemo.schema` is imported
(the names allowed for `darling.method` and `darling.fusion`, the keys the methods
declare), so registering after that is refused rather than silently missing from configs.
"""

from __future__ import annotations

from darling_nemo.methods.base import Fusion, Key, Method

_METHODS: dict[str, Method] = {}
_FUSIONS: dict[str, Fusion] = {}
_READ_BY_SCHEMA: list[bool] = [False]


def _check_new(name: str, taken: dict, kind: str, keys: tuple[Key, ...]) -> None:
    if _READ_BY_SCHEMA[0]:
        raise RuntimeError(
            f"{kind} {name!r} registered after darling_nemo.schema read the registry: "
            "register it before the schema is imported (its name and keys are read once)"
        )
    if name in taken:
        raise ValueError(f"{kind} {name!r} is registered already")
    owned = {key.name for key in all_keys()}
    clash = sorted(owned & {key.name for key in keys})
    if clash:
        raise ValueError(f"{kind} {name!r} declares key(s) {clash} another entry declares")


def register_method(method: Method) -> None:
    """Add a `darling.method` value."""
    _check_new(method.name, _METHODS, "method", method.keys)
    _METHODS[method.name] = method


def register_fusion(fusion: Fusion) -> None:
    """Add a `darling.fusion` value (of method darling)."""
    _check_new(fusion.name, _FUSIONS, "fusion", fusion.keys)
    _FUSIONS[fusion.name] = fusion


def method(name: str) -> Method:
    """The registered method `name` (KeyError names the known ones)."""
    try:
        return _METHODS[name]
    except KeyError:
        raise KeyError(f"unknown darling.method {name!r}: one of {', '.join(_METHODS)}") from None


def fusion(name: str) -> Fusion:
    """The registered fusion `name` (KeyError names the known ones)."""
    try:
        return _FUSIONS[name]
    except KeyError:
        raise KeyError(f"unknown darling.fusion {name!r}: one of {', '.join(_FUSIONS)}") from None


def method_names() -> tuple[str, ...]:
    return tuple(_METHODS)


def fusion_names() -> tuple[str, ...]:
    return tuple(_FUSIONS)


def all_keys() -> tuple[Key, ...]:
    """Every config key a registered method or fusion declares, in registration order."""
    owners = [*_METHODS.values(), *_FUSIONS.values()]
    return tuple(key for owner in owners for key in owner.keys)


def read_by_schema() -> None:
    """Called by the schema once it has read the registry: later registrations are refused."""
    _READ_BY_SCHEMA[0] = True
