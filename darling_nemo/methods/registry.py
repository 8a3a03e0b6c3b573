"""The registry of diversity methods and fusions: the one place a method's name is looked up.

`methods/__init__.py` registers the built-in ones; a new method is one module and one
`register_method` line there, or `register_method` / `registered_method` at run time, as
tests/core/test_methods_registry.py does with a toy one. The verbs are every registry's
(darling_nemo/registries.py), and so is the lifetime: the config schema follows the registry
(`on_change`), so `darling.method`, `darling.fusion` and the methods' own keys accept what
is registered now, whether it was registered before or after the schema was imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar

from darling_nemo.methods.base import Fusion, Key, Method

Entry = TypeVar("Entry", Method, Fusion)

_METHODS: dict[str, Method] = {}
_FUSIONS: dict[str, Fusion] = {}
_FOLLOWERS: list[Callable[[], None]] = []


def on_change(follower: Callable[[], None]) -> None:
    """Call `follower` after every registration and removal (the schema's, which rebuilds
    the `darling:` section from the registry). A follower that refuses an entry (raises)
    leaves the registry as it was."""
    _FOLLOWERS.append(follower)


def _changed() -> None:
    for follower in _FOLLOWERS:
        follower()


def _add(entry: Method | Fusion, taken: dict, kind: str) -> None:
    if entry.name in taken:
        raise ValueError(f"{kind} {entry.name!r} is registered already")
    owned = {key.name for key in all_keys()}
    clash = sorted(owned & {key.name for key in entry.keys})
    if clash:
        raise ValueError(f"{kind} {entry.name!r} declares key(s) {clash} another entry declares")
    taken[entry.name] = entry
    try:
        _changed()
    except BaseException:
        del taken[entry.name]
        _changed()
        raise


def register_method(entry: Method) -> None:
    """Add a `darling.method` value; configs accept it (and its keys) from now on."""
    _add(entry, _METHODS, "method")


def register_fusion(entry: Fusion) -> None:
    """Add a `darling.fusion` value (of method darling)."""
    _add(entry, _FUSIONS, "fusion")


def unregister_method(name: str) -> None:
    """Remove a method `register_method` added; configs refuse it (and its keys) again."""
    del _METHODS[name]
    _changed()


def unregister_fusion(name: str) -> None:
    """Remove a fusion `register_fusion` added; configs refuse it again."""
    del _FUSIONS[name]
    _changed()


@contextmanager
def _for_block(entry: Entry, kinds: dict[str, Entry]) -> Iterator[Entry]:
    # registries.registered_for_block's work: the methods import nothing outside methods/
    _add(entry, kinds, "method" if kinds is _METHODS else "fusion")
    try:
        yield entry
    finally:
        del kinds[entry.name]
        _changed()


def registered_method(entry: Method) -> AbstractContextManager[Method]:
    """A method registered for the duration of the block."""
    return _for_block(entry, _METHODS)


def registered_fusion(entry: Fusion) -> AbstractContextManager[Fusion]:
    """A fusion registered for the duration of the block."""
    return _for_block(entry, _FUSIONS)


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
    """The registered methods' names, in registration order."""
    return tuple(_METHODS)


def fusion_names() -> tuple[str, ...]:
    """The registered fusions' names, in registration order."""
    return tuple(_FUSIONS)


def all_keys() -> tuple[Key, ...]:
    """Every config key a registered method or fusion declares, in registration order."""
    owners = [*_METHODS.values(), *_FUSIONS.values()]
    return tuple(key for owner in owners for key in owner.keys)
