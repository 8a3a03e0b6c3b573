"""The task registry: the one place a task's name is looked up.

`tasks/__init__.py` registers the shipped tasks; a new task is one module (a `base.Task`,
and its TRL `task:` section, a `schema.TaskSection` whose `kind` is the task's name) and one
`register_task` line there, or `register_task` / `registered_task` at run time, as the tests
do (the verbs every registry shares, darling_nemo/registries.py).
Registering a task with a TRL section makes TRL run configs accept `task.kind: <name>`
(`schema.trl.use_task_configs`), the way registering a judge kind does for `darling.judge`,
so a late registration is never silently missing from the configs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, get_args

from darling_nemo.registries import registered_for_block
from darling_nemo.schema.trl import BUILTIN_TASK_CONFIGS, use_task_configs
from darling_nemo.tasks.base import Task

_TASKS: dict[str, Task] = {}


def _configs() -> tuple[type, ...]:
    registered = tuple(t.config for t in _TASKS.values() if t.config is not None)
    return tuple(dict.fromkeys((*BUILTIN_TASK_CONFIGS, *registered)))


def _check_new(entry: Task) -> None:
    taken = {name for t in _TASKS.values() for name in (t.name, *t.aliases)}
    clash = sorted(taken & {entry.name, *entry.aliases})
    if clash:
        raise ValueError(f"task {entry.name!r}: name(s) {clash} are registered already")
    if entry.config is None:
        return
    kind = ", ".join(map(repr, get_args(entry.config.model_fields["kind"].annotation)))
    if kind != repr(entry.name):
        raise ValueError(f"task {entry.name!r}: its config's kind is {kind}, not its name")
    for trait in ("graded",):
        if getattr(entry.config, trait) != getattr(entry, trait):
            raise ValueError(f"task {entry.name!r}: {trait} differs from its config class's")


def register_task(entry: Task) -> None:
    """Add a task; TRL configs accept its `task:` section from now on."""
    _check_new(entry)
    _TASKS[entry.name] = entry
    use_task_configs(_configs())


def unregister_task(name: str) -> None:
    """Remove a task `register_task` added; TRL configs refuse it again (shipped sections
    stay in the schema)."""
    del _TASKS[name]
    use_task_configs(_configs())


def registered_task(entry: Task) -> AbstractContextManager[Task]:
    """A task registered for the duration of the block."""
    return registered_for_block(entry, entry.name, register_task, unregister_task)


def task(name: str) -> Task:
    """The registered task `name` or one of its older spellings (KeyError names the known
    ones)."""
    for entry in _TASKS.values():
        if name == entry.name or name in entry.aliases:
            return entry
    raise KeyError(f"unknown task {name!r}: one of {', '.join(_TASKS)}")


def task_names() -> tuple[str, ...]:
    """The registered tasks' names, in registration order."""
    return tuple(_TASKS)


def trains_from_section(entry: Task) -> bool:
    """Whether NeMo-RL trains the task from a config's own `task:` section (its TRL
    `prompts` and `quality` in one generic environment, darling_nemo/nemo_rl/user_env.py):
    any task with a TRL section, prompts and quality that does not bring NeMo-RL objects of
    its own (`nemo_rl`: those train from NeMo-RL's data: and env: sections instead), a
    plugin's as much as a shipped one's."""
    return entry.nemo_rl is None and None not in (entry.config, entry.prompts, entry.quality)


def section_task_names() -> tuple[str, ...]:
    """The registered tasks NeMo-RL trains from a `task:` section, in registration order."""
    return tuple(name for name, entry in _TASKS.items() if trains_from_section(entry))


def task_of(section: Any) -> Task:
    """The task a validated TRL `task:` section belongs to (by its `kind`)."""
    return task(str(section.kind))
