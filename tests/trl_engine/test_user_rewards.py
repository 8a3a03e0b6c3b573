"""A user's reward functions (task.kind: reward_funcs), from a module outside the package.

Each test writes its reward module into tmp_path (not importable from the package) and
points a config at it: the bad inputs of the config phase are one line and exit 2 (in this
interpreter, no subprocess), the run-time pool stops a hung call and names a raising row,
and the TRL engine trains two steps on it with DARLING's metrics logged.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from helpers import REPO

from darling_nemo.console import say
from darling_nemo.recipe import Recipe, run_recipe
from darling_nemo.schema import DarlingConfig
from darling_nemo.trl.reward import DarlingReward
from darling_nemo.user_rewards import POOL_START_METRIC, RewardFunctionError, UserQuality


def recipe_task() -> Recipe:
    """The recipe's own task, so the test runs what `uv run recipes/darling_task.py` runs."""
    spec = importlib.util.spec_from_file_location("darling_task", REPO / "recipes/darling_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.USER_TASK


TASK = recipe_task()

ROWS = [
    {"id": "q0", "prompt": "say one", "answer": "one"},
    {"id": "q1", "prompt": "say two", "answer": "two"},
    {"id": "q2", "prompt": "say three", "answer": "three"},
    {"id": "q3", "prompt": "say four", "answer": "four"},
]

GOOD = """
def says_answer(prompts, completions, answer, **kwargs):
    return [float(a in c) for c, a in zip(completions, answer)]

def short(prompts, completions, **kwargs):
    return [None if len(c) > 40 else 1.0 for c in completions]
"""


@pytest.fixture(autouse=True)
def _own_sys_path(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # python_path folders go again


def user_folder(tmp_path: Path, module: str, source: str) -> Path:
    folder = tmp_path / "user"
    folder.mkdir(exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return folder


NEMO_RL_CONFIG = Path(__file__).resolve().parents[2] / "conf/code_tests_qwen3_1p7b_darling.yaml"


def write_config(
    tmp_path: Path, folder: Path, funcs: list[str], engine: str = "trl", **task: object
) -> Path:
    """A config over the user's folder: a TRL run, or (engine nemo_rl) the shipped NeMo-RL
    config of the example with its task: section pointed at the folder."""
    if engine == "nemo_rl":
        section = {
            "data_path": str(folder / "data.jsonl"),
            "python_path": [str(folder)],
            "reward_funcs": funcs,
            "reward_weights": None,
            **task,
        }
        # copied out of conf/ as docs/your-own-task.md says: its own `defaults:` entry
        # (base/common.yaml) is then found in the package's conf/
        copy = tmp_path / NEMO_RL_CONFIG.name
        copy.write_text(NEMO_RL_CONFIG.read_text())
        path = tmp_path / "task_nemo_rl.yaml"
        path.write_text(yaml.safe_dump({"defaults": [copy.name], "task": section}))
        return path
    cfg = {
        "engine": "trl",
        "output_dir": str(tmp_path / "run"),
        "torch_threads": 1,
        "task": {
            "kind": "reward_funcs",
            "data_path": str(folder / "data.jsonl"),
            "python_path": [str(folder)],
            "reward_funcs": funcs,
            "reward_workers": 1,
            **task,
        },
        "trainer": {
            "max_steps": 2,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_completion_length": 8,
            "save_steps": 1,
        },
        "logging": {"report_to": [], "progress_bar": False, "print_metrics": False},
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def f_returning(value: str, parameters: str = "prompts, completions, **kw") -> str:
    """The source of a user's function `f` that returns `value`."""
    return f"def f({parameters}):\n    return {value}\n"


# case -> (the function's name, its module's source, words of the one-line refusal)
BAD = {
    "no_module": ("{m}:says_answer", "", "task.reward_funcs[0]: {m}_absent:f: cannot import"),
    "no_function": ("{m}:absent", "", "task.reward_funcs[0]: {m}:absent: {m} has no 'absent'"),
    "signature": ("{m}:f", f_returning("[1.0]", "completions"), "cannot take TRL's keywords"),
    "length": ("{m}:f", f_returning("[]"), "returned 0 values"),
    "type": ("{m}:f", f_returning("['1']"), "returned str '1'"),
    "not_a_list": ("{m}:f", f_returning("1.0"), "not a list"),
    "nan": ("{m}:f", f_returning("[float('nan')]"), "nan"),
    "raises": ("{m}:f", f_returning("[1 / 0]"), "ZeroDivision"),
    "all_none": (
        "{m}:f",
        f_returning("[None for _ in completions]"),
        "gave None for every completion of the first prompt",
    ),
    # TRL's keyword is completions: the hint says what to rename
    "singular": (
        "{m}:f",
        f_returning("[1.0]", "prompts, completion, **kw"),
        "rename 'completion' to 'completions'",
    ),
}


def dry_run_error(tmp_path, capsys, engine, module, source, funcs, **task) -> str:
    """The one line a --dry-run of these functions prints as it exits 2."""
    folder = user_folder(tmp_path, module, GOOD + source)
    config = write_config(tmp_path, folder, funcs, engine, **task)
    code = run_recipe(TASK, "test", ["--config", str(config), "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("engine", ["trl", "nemo_rl"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_reward_function_is_one_line_and_exit_2_at_dry_run(case, engine, tmp_path, capsys):
    func, source, words = BAD[case]
    module = f"user_rewards_{case}"
    func = f"{module}_absent:f" if case == "no_module" else func.format(m=module)
    # the bad one second: the message names its index
    funcs = [f"{module}:says_answer", func]
    line = dry_run_error(tmp_path, capsys, engine, module, source, funcs)
    expected = words.format(m=module).replace("reward_funcs[0]", "reward_funcs[1]")
    assert "task.reward_funcs[1]" in line and expected in line, line


@pytest.mark.parametrize("engine", ["trl", "nemo_rl"])
def test_a_function_slower_than_the_timeout_is_refused_at_dry_run(engine, tmp_path, capsys):
    slow = "import time\ndef slow(prompts, completions, **kw):\n    time.sleep(0.5)\n    return [1.0]\n"
    folder = user_folder(tmp_path, "user_rewards_slow", GOOD + slow)
    funcs = ["user_rewards_slow:says_answer", "user_rewards_slow:slow"]
    config = write_config(tmp_path, folder, funcs, engine, reward_timeout_s=0.2)
    assert run_recipe(TASK, "test", ["--config", str(config), "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "task.reward_funcs[1]: user_rewards_slow:slow took 0." in line
    assert "over task.reward_timeout_s=0.2 s" in line


@pytest.mark.parametrize("engine", ["trl", "nemo_rl"])
def test_weights_must_match_the_functions(engine, tmp_path, capsys):
    folder = user_folder(tmp_path, "user_rewards_weights", GOOD)
    config = write_config(
        tmp_path, folder, ["user_rewards_weights:says_answer"], engine, reward_weights=[1.0, 2.0]
    )
    assert run_recipe(TASK, "test", ["--config", str(config), "--dry-run"]) == 2
    assert "reward_weights has 2 weight(s) for 1 reward_funcs" in capsys.readouterr().err


ANSWERS = """
WORDS = {"one", "two", "three", "four"}

def number_word(prompts, completions, **kwargs):
    return [next((w for w in reversed(c.split()) if w in WORDS), None) for c in completions]
"""


@pytest.mark.parametrize("engine", ["trl", "nemo_rl"])
def test_outcome_needs_an_answer_function_and_runs_with_one(engine, tmp_path, capsys):
    # graded scores: outcome compares final answers, which task.answer_func gives
    folder = user_folder(tmp_path, "user_rewards_outcome", GOOD + ANSWERS)
    config = write_config(tmp_path, folder, ["user_rewards_outcome:says_answer"], engine)
    argv = ["--config", str(config), "--dry-run", "darling.method=outcome"]
    assert run_recipe(TASK, "test", argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "darling.method=outcome needs final answers to compare; task.kind=reward_funcs has "
        "graded scores and no final answer: use method darling, or set task.answer_func"
    ), err
    with_answers = [*argv, "task.answer_func=user_rewards_outcome:number_word"]
    assert run_recipe(TASK, "test", with_answers) == 0
    assert yaml.safe_load(capsys.readouterr().out)["darling"]["method"] == "outcome"
    # pass@k needs a verifier's 0/1, which answers do not give: still refused
    pass_at_k = [*with_answers[:3], "darling.method=pass_at_k", with_answers[-1]]
    assert run_recipe(TASK, "test", pass_at_k) == 2
    assert "needs binary rewards" in capsys.readouterr().err


BAD_ANSWERS = {
    "no_function": ("{m}:absent", "", "task.answer_func: {m}:absent: {m} has no 'absent'"),
    "length": ("{m}:f", f_returning("[]"), "returned 0 answers"),
    "type": (
        "{m}:f",
        f_returning("[1]"),
        "task.answer_func: {m}:f returned int 1 for completion 0 on the first prompt: want a str "
        "or None (no answer)",
    ),
    "not_a_list": ("{m}:f", f_returning("'x'"), "not a list"),
    **{case: BAD[case] for case in ("raises", "singular")},  # the same words for both kinds
}


@pytest.mark.parametrize("engine", ["trl", "nemo_rl"])
@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_a_bad_answer_function_is_one_line_and_exit_2_at_dry_run(case, engine, tmp_path, capsys):
    func, source, words = BAD_ANSWERS[case]
    module = f"user_answers_{case}"
    answer_func = func.format(m=module)
    funcs = [f"{module}:says_answer"]
    line = dry_run_error(tmp_path, capsys, engine, module, source, funcs, answer_func=answer_func)
    assert "task.answer_func: " + answer_func in line and words.format(m=module) in line, line


def test_outcome_partitions_the_answers_of_the_answer_function(tmp_path):
    """Hand-computed: classes are equal answers ("it is one" and "one" agree), a completion
    with no answer (None) is a class of its own ("hm" twice: two classes), and outcome's
    reward is quality - 0.5 * (others with the same answer) / 4."""
    user_folder(tmp_path, "user_answers_outcome", GOOD + ANSWERS)
    quality = UserQuality(
        ["user_answers_outcome:says_answer"],
        None,
        [str(tmp_path / "user")],
        2,
        60.0,
        {},
        "user_answers_outcome:number_word",
    )
    darling = DarlingConfig(method="outcome")
    reward = DarlingReward(quality, darling, 4, judge=None, answers=quality.answers)
    completions = ["it is one", "one", "two", "hm", "hm", "hm", "two", "so two"]
    try:
        advantages = reward(
            prompts=["say one"] * 4 + ["say two"] * 4,
            completions=completions,
            answer=["one"] * 4 + ["two"] * 4,
        )
    finally:
        quality.close()
    batch = reward.last_batch
    assert batch.quality.tolist() == [1, 1, 0, 0, 0, 0, 1, 1]
    assert batch.class_ids.tolist() == [0, 0, 1, 2, 0, 1, 2, 2]
    assert batch.num_classes == [3, 3]
    assert batch.reward.tolist() == [0.875, 0.875, 0, 0, 0, 0, 0.875, 0.875]
    assert advantages == [0.4375, 0.4375, -0.4375, -0.4375, -0.4375, -0.4375, 0.4375, 0.4375]
    assert quality.last_metrics["darling/answer_timeouts"] == 0.0


HANGS = """
import time


def hang_if_asked(completions):
    if "hang" in completions:
        time.sleep(600)  # past any timeout of these tests


def slow(prompts, completions, **kwargs):
    hang_if_asked(completions)
    return [1.0 for _ in completions]


def answer(prompts, completions, **kwargs):
    hang_if_asked(completions)
    return [str(1 // len(c)) for c in completions]
"""


def test_a_hung_or_raising_answer_call_is_stopped_or_named(tmp_path, capsys):
    user_folder(tmp_path, "user_answers_hang", HANGS)
    labels = {"b": "data.jsonl:2 (id q1)"}
    quality = UserQuality(
        ["user_answers_hang:answer"],
        None,
        [str(tmp_path / "user")],
        2,
        2.0,
        labels,
        "user_answers_hang:answer",
    )
    try:
        assert quality.answers(prompts=["a", "b"], completions=["x", "hang"]) == ["1", None]
        assert quality.last_metrics["darling/answer_timeouts"] == 1.0
        assert "their rows have no answer (darling/answer_timeouts)" in capsys.readouterr().err
        with pytest.raises(RewardFunctionError) as raised:
            quality.answers(prompts=["a", "b"], completions=["x", ""])
    finally:
        quality.close()
    assert str(raised.value) == (
        "answer function user_answers_hang:answer raised on data.jsonl:2 (id q1): "
        "ZeroDivisionError: integer division or modulo by zero"
    )


@pytest.mark.parametrize("engine", ["trl", "nemo_rl"])
def test_a_good_module_passes_the_dry_run(engine, tmp_path, capsys):
    # nemo_rl: the example's NeMo-RL config (Qwen3-1.7B, Megatron) on the user's module
    folder = user_folder(tmp_path, "user_rewards_good", GOOD)
    funcs = ["user_rewards_good:says_answer", "user_rewards_good.short"]
    config = write_config(tmp_path, folder, funcs, engine)
    assert run_recipe(TASK, "test", ["--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    checked = [line for line in out.splitlines() if line.startswith("checked ")]
    assert [line.split(" -> ")[0] for line in checked] == [
        "checked task.reward_funcs[0]: user_rewards_good:says_answer",
        "checked task.reward_funcs[1]: user_rewards_good.short",
    ]  # one line per function: name, values, seconds
    assert checked[1].split(" -> ")[1].startswith("[1.0] in ")
    printed = yaml.safe_load("\n".join(line for line in out.splitlines() if line not in checked))
    assert printed["engine"] == engine
    assert printed["task"]["reward_funcs"] == funcs


def test_quality_is_trls_weighted_nansum_in_the_pool(tmp_path):
    user_folder(tmp_path, "user_rewards_sum", GOOD)
    quality = UserQuality(
        ["user_rewards_sum:says_answer", "user_rewards_sum:short"],
        [2.0, 0.5],
        [str(tmp_path / "user")],
        workers=2,
        timeout_s=60.0,
        row_labels={},
    )
    try:
        long = "x" * 50
        scores = quality(
            prompts=["p"] * 4,
            completions=["one", "two", long, long + "one"],
            answer=["one", "one", "one", "one"],
        )
        # the pool's start-up (every worker up) is its own figure, not the functions' time
        started = quality.last_metrics.pop(POOL_START_METRIC)
        assert started > 0.0 and quality.pool_start_total == started
        assert quality(prompts=["p"], completions=["one"], answer=["one"]) == [2.5]
        assert POOL_START_METRIC not in quality.last_metrics  # the same pool
    finally:
        quality.close()
    # row 2: says_answer 0.0 counts, short None is skipped; row 3: 2 * 1.0 + nothing
    assert scores == [2.0 * 1 + 0.5, 0.5, 0.0, 2.0]
    assert quality.last_metrics["darling/reward_timeouts"] == 0.0


def test_a_hung_call_is_stopped_counted_and_scores_zero(tmp_path, capsys):
    user_folder(tmp_path, "user_rewards_hang", HANGS)
    quality = UserQuality(
        ["user_rewards_hang:slow"], None, [str(tmp_path / "user")], 2, 2.0, row_labels={}
    )
    started = time.monotonic()
    try:
        scores = quality(prompts=["a", "b"], completions=["fine", "hang"])
        assert time.monotonic() - started < 300  # the hung call was stopped, not waited for
        assert scores == [1.0, 0.0]
        assert quality.last_metrics["darling/reward_timeouts"] == 1.0
        assert "1 call(s) past task.reward_timeout_s=2.0s stopped" in capsys.readouterr().err
        assert quality(prompts=["a", "b"], completions=["x", "y"]) == [1.0, 1.0]  # a new pool
    finally:
        quality.close()


def test_a_run_time_line_never_shares_a_line_with_a_progress_bar():
    """The pool's lines go through console.say: with a bar open (TRL's, on the same stream)
    the line is written on its own line and the bar redrawn below it."""
    from tqdm import tqdm

    out = io.StringIO()
    with tqdm(total=4, file=out, ascii=True) as bar:
        bar.update(1)
        assert not out.getvalue().endswith("\n")  # a bar's line is open
        say("rewards:slow: 1 call(s) past task.reward_timeout_s=2.0s stopped", file=out)
        bar.update(1)
    lines = re.split(r"[\r\n]", out.getvalue())
    assert "rewards:slow: 1 call(s) past task.reward_timeout_s=2.0s stopped" in lines
    plain = io.StringIO()
    say("no bar", file=plain)
    assert plain.getvalue() == "no bar\n"


def test_a_raising_function_names_itself_the_row_and_the_exception(tmp_path):
    source = """
    def picky(prompts, completions, **kwargs):
        return [1.0 / len(c) for c in completions]
    """
    user_folder(tmp_path, "user_rewards_raise", source)
    labels = {"b": "data.jsonl:2 (id q1)"}
    quality = UserQuality(
        ["user_rewards_raise:picky"], None, [str(tmp_path / "user")], 1, 60.0, labels
    )
    try:
        with pytest.raises(RewardFunctionError) as raised:
            quality(prompts=["a", "b", "c"], completions=["ok", "", "ok"])
    finally:
        quality.close()
    assert str(raised.value) == (
        "reward function user_rewards_raise:picky raised on data.jsonl:2 (id q1): "
        "ZeroDivisionError: float division by zero"
    )


def test_a_row_cut_to_the_prompt_budget_is_named_by_its_file_line(tmp_path):
    """The labels come from the rows the task's prompts read, as fitted to the budget: a
    prompt cut short (task.long_prompts: truncate) is still named by its file:line and id."""
    from darling_nemo.trl import validate_trl_config
    from darling_nemo.trl.tasks import build_task

    source = """
    def picky(prompts, completions, **kwargs):
        return [1.0 / (c != "boom") for c in completions]
    """
    folder = user_folder(tmp_path, "user_rewards_cut", source)
    funcs = ["user_rewards_cut:picky"]
    config = write_config(
        tmp_path, folder, funcs, max_prompt_tokens=1, long_prompts="truncate", max_prompts=1
    )
    task = build_task(validate_trl_config(yaml.safe_load(config.read_text())))
    try:
        [prompt] = [row["prompt"] for row in task.train_rows]
        assert prompt != ROWS[0]["prompt"]  # cut to the budget
        with pytest.raises(RewardFunctionError) as raised:
            task.quality(prompts=[prompt], completions=["boom"])
    finally:
        task.quality.close()
    assert f"raised on {folder / 'data.jsonl'}:1 (id q0): ZeroDivisionError" in str(raised.value)


BREAKS_AT_STEP_2 = (
    GOOD
    + """
from pathlib import Path

def breaks_once(prompts, completions, trainer_state=None, **kwargs):
    flag = Path(__file__).with_name("broken")
    if trainer_state is not None and trainer_state.global_step >= 1 and flag.exists():
        raise KeyError("tests")
    if trainer_state is not None and Path(__file__).with_name("silent").exists():
        return [None for _ in completions]
    return [0.0 for _ in completions]

def quiet_answer(prompts, completions, answer, trainer_state=None, **kwargs):
    # None for every completion at run time only: the run's first check calls it without
    if trainer_state is not None and Path(__file__).with_name("silent").exists():
        return [None for _ in completions]
    return says_answer(prompts, completions, answer)
"""
)


def test_the_trl_engine_trains_two_steps_on_a_users_module(tmp_path, monkeypatch, capsys):
    """A function that raises at step 2 ends the run in one line (exit 1) naming it, the
    row and the kept checkpoint; so does, resumed, a step 2 where every function returns
    None for a completion (naming the functions); the same command then resumes and
    finishes with DARLING's metrics and the functions' own logged, the pool's start-up apart
    from the functions' time. The method is outcome, its classes the final answers of the
    user's answer function."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = user_folder(tmp_path, "user_rewards_train", BREAKS_AT_STEP_2 + ANSWERS)
    (folder / "broken").touch()
    funcs = ["user_rewards_train:quiet_answer", "user_rewards_train:breaks_once"]
    answers = "user_rewards_train:number_word"
    config = write_config(tmp_path, folder, funcs, reward_weights=[1.0, 0.1], answer_func=answers)
    cfg = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**cfg, "darling": {"method": "outcome"}}))
    assert run_recipe(TASK, "test", ["--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    row = re.escape(str(folder / "data.jsonl")) + r":(\d) \(id q(\d)\)"
    line = re.fullmatch(
        "darling_task: reward function user_rewards_train:breaks_once raised on "
        + row
        + r": KeyError: 'tests'; stopped after step 1 of 2; the last complete checkpoint is "
        + re.escape(f"checkpoint-1 in {tmp_path / 'run'}; ")
        + "the same command resumes from it",
        err[-1],
    )
    assert line, err[-1]
    assert int(line[1]) == int(line[2]) + 1  # the row's line and its id agree
    (folder / "broken").unlink()
    (folder / "silent").touch()
    assert run_recipe(TASK, "test", ["--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    line = re.fullmatch(
        r"darling_task: every reward function \(user_rewards_train:quiet_answer, "
        r"user_rewards_train:breaks_once\) returned None for "
        + row
        + ": DARLING needs a quality for every completion; stopped after step 1 of 2; the "
        + re.escape(f"last complete checkpoint is checkpoint-1 in {tmp_path / 'run'}; ")
        + "the same command resumes from it",
        err[-1],
    )
    assert line, err[-1]
    (folder / "silent").unlink()
    assert run_recipe(TASK, "test", ["--config", str(config)]) == 0
    final = json.loads((tmp_path / "run" / "final_metrics.json").read_text())
    assert (final["global_step"], final["resumed_from_step"]) == (2, 1)
    logged = [json.loads(line) for line in (tmp_path / "run/train_log.jsonl").open()]
    assert [record["step"] for record in logged] == [1, 2]  # step 1 from checkpoint-1
    for record in logged:
        assert record["darling/reward_timeouts"] == 0.0
        assert record["darling/answer_timeouts"] == 0.0  # the answer function was called
        assert record["darling/quality_seconds"] > 0.0
        # each step here started a pool (step 2: the resumed run's), timed on its own
        assert record["darling/reward_pool_start_seconds"] > 0.0
        assert record["darling/num_groups"] == 2
