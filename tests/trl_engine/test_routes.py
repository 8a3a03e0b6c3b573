"""The routes task is what pre-registration 1 (docs/preregistration.md) says: its judge, its
data split (no held-out grid in RL or in the warm start) and its evaluation (unbiased pass@64
from 128 samples per held-out grid, on at least 64 grids)."""

from __future__ import annotations

from itertools import combinations, product
from math import comb
from pathlib import Path

import numpy as np
import pytest

from darling_nemo.config import load_config
from darling_nemo.core import partition_groups
from darling_nemo.metrics import pass_at_k
from darling_nemo.mini.routes import grid_of, prompt_text, route_judge, turns, visited
from darling_nemo.schema import (
    LatticeRoutesTaskConfig,
    MiniConfig,
    WarmStartConfig,
    validate_section,
)
from darling_nemo.tasks import task_of
from darling_nemo.tasks.lattice_routes import miniature, prompts, routes_task
from darling_nemo.trl.evaluate import stratum_pass_at_k, unique

REPO = Path(__file__).resolve().parents[2]
SECTION = LatticeRoutesTaskConfig(kind="lattice_routes")
TASK = routes_task(SECTION)


class Cfg:
    task = SECTION


def test_the_judge_is_the_exact_route_and_symmetric():
    a, b = "R R R R U U U U", "R R R U U U U R"
    assert route_judge([(a, a), (a, b), (b, a)]) == [1.0, 0.0, 0.0]
    # 8-word answers are past the core's short-answer rule: the judge decides every pair,
    # so a group of 3 routes, two of them equal, has 2 classes.
    (partition,) = partition_groups([[a, b, a]], route_judge, 0.5)
    assert partition.num_classes == 2


def test_correct_means_four_of_each_move_and_no_blocked_point():
    prompt = prompt_text(((1, 0),))  # the first step right is blocked
    assert prompt == "B10 B-- B--" and grid_of(prompt) == ((1, 0),)
    assert not TASK.is_correct(prompt, "R R R R U U U U")
    assert TASK.is_correct(prompt, "U R R R R U U U")
    assert not TASK.is_correct(prompt, "U R R R R U U")  # 7 moves
    assert not TASK.is_correct(prompt, "U U U U U R R R")  # 5 U
    assert visited("RRU") == [(1, 0), (2, 0), (2, 1)] and turns("RRUUR") == 2


def test_the_grids_are_every_solvable_set_of_one_to_three_walls():
    points = [p for p in product(range(5), repeat=2) if p not in ((0, 0), (4, 4))]
    routes = {r for r in product("RU", repeat=8) if r.count("R") == 4}
    assert len(routes) == comb(8, 4) == 70
    solvable = [
        g
        for k in (1, 2, 3)
        for g in combinations(points, k)
        if any(not set(g) & set(visited(r)) for r in routes)
    ]
    assert len(points) == 23 and sum(comb(23, k) for k in (1, 2, 3)) == 2047
    assert sorted(TASK.grids) == sorted(solvable) and len(solvable) == 1997


def test_no_heldout_grid_is_trained_on_by_rl_or_the_warm_start():
    split = TASK.split()
    heldout = set(split["heldout"])
    assert len(heldout) == 128 >= 64 and len(split["train"]) == 400
    assert not heldout & set(split["train"]) and not heldout & set(split["warm_start"])
    assert set(split["train"]) <= set(split["warm_start"])
    rows = prompts(Cfg)
    heldout_prompts = {row["prompt"] for row in rows.heldout}
    assert not heldout_prompts & {row["prompt"] for row in rows.train}
    data = miniature(SECTION, WarmStartConfig()).warm_start(1)
    assert not heldout_prompts & {data.prompt(key) for key in data.keys}


def test_hard_grids_are_those_the_habit_rarely_solves():
    # Blocking (1, 0) forbids every route that starts right: what is left is the habit's
    # "up first" mass, exp(-3) times smaller per route.
    blocked = ((1, 0),)
    up_first = [i for i, r in enumerate(TASK.routes) if r[0] == "U"]
    assert TASK.valid(blocked) == up_first
    assert TASK.habit_mass(blocked) == pytest.approx(TASK.prior[up_first].sum())
    assert TASK.is_hard(blocked) and not TASK.is_hard(((2, 2),))
    strata = [row["stratum"] for row in prompts(Cfg).heldout]
    assert strata.count("hard") == 13  # the number the plan states


def test_the_warm_start_draws_the_habit_whatever_the_walls():
    rng = np.random.default_rng(0)
    draws = [tuple(TASK.sample_answer(((1, 0),), rng, obey_walls=False)) for _ in range(2000)]
    share = draws.count(tuple("RRRRUUUU")) / len(draws)
    assert share == pytest.approx(TASK.prior.max(), abs=0.03)  # the top route, walls ignored
    obeying = [TASK.sample_answer(((1, 0),), rng, obey_walls=True) for _ in range(200)]
    assert all(route[0] == "U" for route in obeying)


def test_the_plans_configs_evaluate_unbiased_pass_at_64_from_128_samples():
    for name in ("routes_gates.yaml", "routes.yaml", "routes_no_habit.yaml"):
        cfg = validate_section(MiniConfig, load_config(str(REPO / "conf" / "mini" / name), []))
        assert task_of(cfg.task).name == "lattice_routes"
        assert cfg.evaluation.num_samples >= 128 and 64 in cfg.evaluation.pass_at_k
        assert cfg.task.heldout_grids >= 64 and cfg.differences[0] == "pass@64"
        assert next(iter(cfg.arms)) == "grpo"
    # unbiased: 1 - C(n - c, k) / C(n, k), by hand for n = 128, k = 64
    for c in (0, 1, 2, 5, 64, 65):
        exact = 1 - comb(128 - c, 64) / comb(128, 64)
        assert pass_at_k(128, c, 64) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_by_stratum_and_classes_without_copies():
    rows = [{"prompt": "a", "stratum": "hard"}, {"prompt": "b", "stratum": "easy"}]
    result = stratum_pass_at_k(rows, [1, 4], 4, [1, 4])
    assert result == {
        "easy/pass@1": 1.0,
        "easy/pass@4": 1.0,
        "hard/pass@1": 0.25,
        "hard/pass@4": 1.0,
    }
    assert stratum_pass_at_k([{"prompt": "a"}], [1], 4, [1]) == {}
    a, b = "R R R R U U U U", "U U U U R R R R"
    group = [a, b, a, a]
    assert unique([group]) == [[a, b]]
    full, deduped = partition_groups([group, *unique([group])], route_judge, 0.5)
    assert full.num_classes == deduped.num_classes == 2


def test_the_main_job_is_the_preregistered_run_less_its_control():
    """conf/mini/default.yaml's GRPO and DARLING runs are routes.yaml's, setting for setting,
    so the main job's table repeats the pre-registered run's rows (evaluating less often and
    running two arms at once change no number)."""
    main, plan = (
        validate_section(MiniConfig, load_config(str(REPO / "conf" / "mini" / name), []))
        for name in ("default.yaml", "routes.yaml")
    )
    assert main.seeds == plan.seeds and list(main.arms) == ["grpo", "darling"]
    assert list(plan.arms) == ["grpo", "darling", "grpo_no_std"]
    where = {"output_dir", "policy", "logging"}  # the folder, and the console
    for arm in main.arms:
        ours, theirs = (cfg.arm_run(1, arm).model_dump(exclude=where) for cfg in (main, plan))
        assert ours.pop("evaluation") | {"every_steps": 100} == theirs.pop("evaluation")
        assert ours == theirs
    for key in ("policy", "task", "warm_start", "cpu_kernels", "torch_threads"):
        assert getattr(main, key) == getattr(plan, key)
