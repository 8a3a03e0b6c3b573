"""The tasks: one module each, one registry that both engines and the tools ask.

    digit_sum.py  the miniature's dice task (TRL engine; its own multiset judge)
    lattice_routes.py  the pre-registered miniature's routes task (TRL engine; exact routes)
    math.py       verifiable math (math-verify), both engines
    chat.py       open-ended chat prompts scored by a reward model, both engines
    reward_funcs.py  a user's TRL-style reward functions over a JSONL, both engines
    judge.py      which pair judge a run calls, decided once from its task and darling:

A new task: its module (a `base.Task`, its TRL `task:` section a `schema.TaskSection`) and
one line below (docs/tasks.md, "Adding a task"). Nothing outside this package,
the schema and conf/ names a task.
"""

from __future__ import annotations

from darling_nemo.tasks import chat, digit_sum, lattice_routes, math, reward_funcs
from darling_nemo.tasks.base import NemoRlTask, Prompts, QualityFn, Task
from darling_nemo.tasks.registry import (
    register_task,
    registered_task,
    section_task_names,
    task,
    task_names,
    task_of,
    trains_from_section,
    unregister_task,
)

# The registry's entries, in the order messages list them.
for _task in (digit_sum.TASK, lattice_routes.TASK, math.TASK, chat.TASK, reward_funcs.TASK):
    register_task(_task)

__all__ = [
    "NemoRlTask",
    "Prompts",
    "QualityFn",
    "Task",
    "register_task",
    "registered_task",
    "section_task_names",
    "task",
    "task_names",
    "task_of",
    "trains_from_section",
    "unregister_task",
]
