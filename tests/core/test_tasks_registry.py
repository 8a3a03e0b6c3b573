"""The task registry (darling_nemo/tasks/): the shipped tasks, their lookup, a toy task
added from a test that TRL run configs accept while it is registered, and refuse after, and
no task named outside the tasks' home (read with `ast`, nothing imported)."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import ClassVar, Literal

import pytest
from helpers import REPO

from darling_nemo import tasks
from darling_nemo.evals.compare import evals_of
from darling_nemo.judges.answers import MathAnswerJudge
from darling_nemo.mini.task import FlippedJudge, JudgeWithEmbeddings, multiset_judge
from darling_nemo.recipe import check_config
from darling_nemo.schema import (
    ConfigError,
    DigitSumTaskConfig,
    TaskSection,
    TrlRunConfig,
    validate_darling,
    validate_section,
)
from darling_nemo.tasks.base import Prompts, Task
from darling_nemo.tasks.judge import run_judge


class ToyTaskConfig(TaskSection):
    graded: ClassVar[bool] = True
    kind: Literal["toy"]
    words: int = 3


def toy_quality(section: ToyTaskConfig):
    return lambda prompts, completions, **_: [
        float(len(c.split()) == section.words) for c in completions
    ]


def toy_check(section: ToyTaskConfig) -> None:
    if section.words > 9:
        raise ConfigError(f"task.words: {section.words}: the toy counts to 9")


EVALS = {"math": "conf/eval/math.yaml"}
TOY = Task(
    "toy",
    "the toy task",
    config=ToyTaskConfig,
    prompts=lambda cfg: Prompts([{"prompt": "say three words"}], [], None),
    quality=toy_quality,
    graded=True,
    config_check=toy_check,
)


def test_the_shipped_tasks_and_their_older_spelling():
    assert tasks.task_names() == ("digit_sum", "lattice_routes", "math", "chat", "reward_funcs")
    assert tasks.task("wildchat") is tasks.task("chat")
    with pytest.raises(
        KeyError,
        match="unknown task 'toy': one of digit_sum, lattice_routes, math, chat, reward_funcs",
    ):
        tasks.task("toy")


def test_a_toy_task_is_accepted_by_trl_configs_while_registered():
    run = {"engine": "trl", "task": {"kind": "toy", "words": 2}}
    with pytest.raises(ConfigError, match="task"):
        validate_section(TrlRunConfig, run, "")
    with tasks.registered_task(TOY):
        cfg = validate_section(TrlRunConfig, run, "")
        assert tasks.task_of(cfg.task) is TOY and cfg.task.words == 2
        assert tasks.task_names()[-1] == "toy"
        quality = TOY.quality(cfg.task)
        assert quality(["p", "p"], ["a b", "a b c"]) == [1.0, 0.0]
        with pytest.raises(ConfigError, match=r"task\.kind=toy has graded scores"):
            validate_section(TrlRunConfig, {**run, "darling": {"method": "outcome"}}, "")
        # a recipe's --dry-run asks the registry for the task's own checks (config_check)
        assert check_config(None, run).task.words == 2
        with pytest.raises(ConfigError, match=r"task\.words: 12: the toy counts to 9"):
            check_config(None, {**run, "task": {"kind": "toy", "words": 12}})
        # registered after every import: darling-compare (slurm/compare.sub) asks for its
        # evaluations when called
        with tasks.registered_task(
            replace(TOY, name="toy_evaluated", config=None, evaluations=EVALS)
        ):
            assert evals_of("toy_evaluated") == EVALS
    with pytest.raises(ConfigError):
        validate_section(TrlRunConfig, run, "")
    with pytest.raises(ConfigError, match="TASK=toy_evaluated: no evaluations for this task"):
        evals_of("toy_evaluated")


def test_a_second_entry_of_a_name_or_a_wrong_kind_is_refused():
    with pytest.raises(ValueError, match=r"name\(s\) \['wildchat'\] are registered already"):
        tasks.register_task(Task("other", "x", aliases=("wildchat",)))
    with pytest.raises(ValueError, match="its config's kind is 'toy', not its name"):
        tasks.register_task(Task("toy2", "x", config=ToyTaskConfig))
    assert tasks.task_names() == ("digit_sum", "lattice_routes", "math", "chat", "reward_funcs")


def test_the_run_judge_is_decided_once_from_task_and_method():
    lexical = validate_darling({})
    outcome = validate_darling({"method": "outcome"})
    assert run_judge(tasks.task("digit_sum"), outcome).make() is multiset_judge
    assert run_judge(tasks.task("math"), outcome).said == "math-verify answers"
    assert run_judge(tasks.task("math"), lexical).make() is None
    with pytest.raises(ValueError, match="the chat task has none"):
        run_judge(tasks.task("chat"), outcome)
    # no task (darling-score, the rivals benchmark): final answers by math-verify
    assert isinstance(run_judge(None, outcome).make(), MathAnswerJudge)
    assert run_judge(None, lexical).make() is None
    assert run_judge(None, validate_darling({"diversity": "ngram"})).make() is None


def test_the_run_judge_with_a_task_section_says_trainings_judge_and_embeddings():
    dice = tasks.task("digit_sum")
    exact = DigitSumTaskConfig(kind="digit_sum")
    flipped = DigitSumTaskConfig(kind="digit_sum", judge_accuracy=0.8)
    darling, dqo = validate_darling({}), validate_darling({"method": "dqo"})
    assert run_judge(dice, darling, exact).training() is None
    assert isinstance(run_judge(dice, darling, flipped).training(), FlippedJudge)
    assert run_judge(dice, darling).training() is None  # no section: make()'s judge
    assert run_judge(dice, darling, exact).for_reward(multiset_judge) is multiset_judge
    with_embeddings = run_judge(dice, dqo, exact).for_reward(multiset_judge)
    assert isinstance(with_embeddings, JudgeWithEmbeddings)
    assert with_embeddings.judge is multiset_judge
    assert run_judge(dice, dqo, exact).for_reward(None) is None


# Where a registered task's name may still be written outside darling_nemo/tasks/ and
# darling_nemo/schema/ (path, name): each is another namespace or an entry point's one name.
NAMES_ALLOWED = {
    # An evaluation's name (conf/eval/<name>.yaml, a summary's "eval", a key of
    # Task.evaluations): evaluations are a namespace of their own; the math task's shares
    # its word.
    ("darling_nemo/evals/compare.py", "math"),
    ("darling_nemo/evals/math.py", "math"),
    ("darling_nemo/evals/plots.py", "math"),
    # The benchmark of the paper's two settings (docs/judge-cost.md), named as there; it
    # rehearses the math recipe.
    ("darling_nemo/bench/step_time.py", "math"),
    ("darling_nemo/bench/step_time.py", "wildchat"),
    # Its measured figures, where the judge-cost model keeps them, keyed by the same names.
    ("darling_nemo/judges/cost.py", "math"),
    ("darling_nemo/judges/cost.py", "wildchat"),
    # A recipe is one task's entry script: it names its task, and the registry says the rest.
    ("recipes/darling_math.py", "math"),
    ("recipes/darling_wildchat.py", "wildchat"),
    ("recipes/darling_task.py", "reward_funcs"),
}
TASKS_HOME = ("darling_nemo/tasks/", "darling_nemo/schema/")


def task_name_literals(names: set[str]) -> dict[tuple[str, str], list[int]]:
    """(path, name) -> the lines where the string constant `name` is written in
    darling_nemo/ or recipes/, outside the tasks' home."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted([*(REPO / "darling_nemo").rglob("*.py"), *(REPO / "recipes").glob("*.py")]):
        where = path.relative_to(REPO).as_posix()
        if where.startswith(TASKS_HOME):
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if isinstance(node, ast.Constant) and node.value in names:
                found.setdefault((where, node.value), []).append(node.lineno)
    return found


def test_no_task_name_is_written_outside_the_tasks_home():
    # issue 35: adding a task is one module and one registry entry; engines, tools and
    # commands ask the registry (a Task field, its section's, or tasks.task(name)).
    names = {n for name in tasks.task_names() for n in (name, *tasks.task(name).aliases)}
    found = task_name_literals(names)
    written = {
        f"{path}:{lines[0]}: {name!r}"
        for (path, name), lines in found.items()
        if (path, name) not in NAMES_ALLOWED
    }
    assert written == set(), "ask the task registry instead of naming a task"
    assert NAMES_ALLOWED - set(found) == set(), "drop allow-list entries no longer needed"
