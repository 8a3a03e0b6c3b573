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

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
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


class PluginError(ValueError):
    """A module named in `darling.plugins` could not be imported (the message names it)."""


DEFAULT_PLUGIN_PATH = (".",)
"""Where `darling.plugins` are looked for first when `plugin_path` is unset: the working
directory (the schema's default, the driver's and the NeMo-RL environment actor's)."""


def import_plugins(darling: object) -> list[str]:
    """Import the modules a raw `darling:` mapping names in `plugins` (each registers its
    methods, judge kinds or tasks when imported, from a folder of the user's), searched
    first in `plugin_path` (default: the working directory); before the config is validated,
    so the names they register are accepted. Returns the modules imported."""
    if not isinstance(darling, dict) or not darling.get("plugins"):
        return []
    modules, folders = darling["plugins"], darling.get("plugin_path", list(DEFAULT_PLUGIN_PATH))
    for key, value in (("plugins", modules), ("plugin_path", folders)):
        # a bare string would be read a character at a time, each taken for a module
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise PluginError(f"darling.{key}: a list of strings expected, got {value!r}")
    for folder in reversed(folders):
        where = str(Path(folder).resolve())
        if where not in sys.path:
            sys.path.insert(0, where)
    for i, name in enumerate(modules):
        try:
            importlib.import_module(name)
        except Exception as err:  # the user's module: any error it raises, named with it
            raise PluginError(
                f"darling.plugins[{i}]: cannot import {name!r} (searched first in "
                f"{', '.join(folders)}): {type(err).__name__}: {err}"
            ) from None
    return list(modules)
