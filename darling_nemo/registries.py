"""What the registries share: one vocabulary and one lifetime (standard library only).

Methods and fusions (`methods/registry.py`), judge kinds (`judges/registry.py`) and tasks
(`tasks/registry.py`) are each registered, removed and looked up with the same verbs, at any
time (before or after `darling_nemo.schema` is imported; the schema follows each registry):

    register_X(entry)      add an entry (ValueError if its name is taken)
    unregister_X(name)     remove it again; the configs refuse it from then on
    registered_X(entry)    a context manager: registered for the duration of the block
    X(name)                the entry of a name (the registry is the one place it is asked)
    X_names()              the registered names, in registration order

The judge and task registries take `registered_for_block` from here; the methods' registry
does the same work itself (the methods import nothing outside darling_nemo/methods/).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

Entry = TypeVar("Entry")


@contextmanager
def registered_for_block(
    entry: Entry, name: str, register: Callable[[Entry], None], unregister: Callable[[str], None]
) -> Iterator[Entry]:
    """`entry` registered (as `name`) for the duration of the block: each `registered_X`."""
    register(entry)
    try:
        yield entry
    finally:
        unregister(name)
