"""lattice_routes: the pre-registered miniature's task (darling_nemo/mini/routes.py), TRL
engine only.

A route of `side` R and `side` U moves that steps on none of a prompt's blocked points;
quality 1 for a correct route. Two answers are one class when they are the same route (its
own exact judge, so `darling.judge` stays unset). Held-out rows carry `stratum` ("hard":
the walls block the habitual routes), which the evaluation reports apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from darling_nemo.mini.routes import LatticeRoutes, prompt_text, route_judge
from darling_nemo.mini.task import FlippedJudge, training_judge_of
from darling_nemo.mini.warm_start import MiniatureTask, WarmStartData
from darling_nemo.schema import LatticeRoutesTaskConfig, WarmStartConfig
from darling_nemo.tasks.base import Prompts, QualityFn, Task
from darling_nemo.tasks.rows import completion_text


def routes_task(section: LatticeRoutesTaskConfig) -> LatticeRoutes:
    return LatticeRoutes(
        side=section.side,
        turn_cost=section.turn_cost,
        up_first_cost=section.up_first_cost,
        grid_seed=section.grid_seed,
        heldout_grids=section.heldout_grids,
        train_grids=section.train_grids,
        hard_mass=section.hard_mass,
    )


def prompts(cfg: Any) -> Prompts:
    task = routes_task(cfg.task)
    split = task.split()
    return Prompts(
        train=[{"prompt": prompt_text(g)} for g in split["train"]],
        heldout=[
            {"prompt": prompt_text(g), "stratum": "hard" if task.is_hard(g) else "easy"}
            for g in split["heldout"]
        ],
        vocabulary=task.vocabulary(),
    )


def quality(section: LatticeRoutesTaskConfig) -> QualityFn:
    task = routes_task(section)

    def route_correct(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        return [
            float(task.is_correct(completion_text(p), completion_text(c)))
            for p, c in zip(prompts, completions, strict=True)
        ]

    return route_correct


def training_judge(section: LatticeRoutesTaskConfig) -> FlippedJudge | None:
    """The route judge made wrong on purpose (task.judge_accuracy or task.judge_false_*):
    DARLING at a measured judge's error rates on the main job's task."""
    return training_judge_of(route_judge, section)


def miniature(section: LatticeRoutesTaskConfig, _: WarmStartConfig) -> MiniatureTask:
    """Every grid but the held-out ones, a habitual correct route each time."""
    task = routes_task(section)
    split = task.split()
    grids = split["warm_start"]
    hard = sum(task.is_hard(g) for g in split["heldout"])

    def data(seed: int) -> WarmStartData:
        return WarmStartData(
            keys=list(range(len(grids))),
            prompt=lambda key: prompt_text(grids[key]),
            answer=lambda key, rng: task.sample_answer(
                grids[key], rng, section.warm_start_obeys_walls
            ),
        )

    return MiniatureTask(
        warm_start=data,
        heldout_note=f"Held-out grids: {len(split['heldout'])} ({hard} hard)",
        title=(
            f"Routes task: {task.side} R + {task.side} U moves around 1-3 blocked points; "
            f"held out of RL: {len(split['heldout'])} grids ({hard} hard)"
        ),
    )


TASK = Task(
    "lattice_routes",
    "the routes task",
    config=LatticeRoutesTaskConfig,
    prompts=prompts,
    quality=quality,
    own_judge=route_judge,
    training_judge=training_judge,
    miniature=miniature,
)
