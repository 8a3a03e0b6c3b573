"""Your own task, method and judge from a folder of your own: each one file that registers
itself when imported, named in `darling.plugins`, used end to end (a TRL run of 2 steps
through the recipe; a NeMo-RL config's --dry-run, with your task as its `task:` section, its
rows and the generic environment's scores, and the rehearsal's prepare phase), then
unregistered and refused again. The folder is a temporary one outside the clone, with
nothing of the package edited."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from test_cli import recipe_main

from darling_nemo import methods, tasks
from darling_nemo.config import load_config
from darling_nemo.judges.registry import judge_kind_names, unregister_judge_kind
from darling_nemo.schema import ConfigError, validate_darling

NEMO_RL_CONFIG = REPO / "conf/code_tests_qwen3_1p7b_darling.yaml"

TOY_TASK = """
from typing import ClassVar, Literal

from darling_nemo.schema import TaskSection
from darling_nemo.tasks import register_task
from darling_nemo.tasks.base import Prompts, Task


class PluginTaskConfig(TaskSection):
    graded: ClassVar[bool] = True
    kind: Literal["plugin_words"]
    words: int = 3


def quality(section):
    return lambda prompts, completions, **_: [
        float(str(c).split().count("three") >= 1) for c in completions
    ]


PROMPTS = [{"prompt": f"say {n} words"} for n in ("three", "some", "two", "the")]
WORDS = ["say", "three", "some", "two", "the", "words", "one"]  # the tiny policy writes these
register_task(
    Task(
        "plugin_words",
        "three words",
        config=PluginTaskConfig,
        prompts=lambda cfg: Prompts(PROMPTS[: cfg.task.words], PROMPTS[3:], WORDS),
        quality=quality,
        graded=True,
    )
)
"""

TOY_JUDGE = """
from typing import Literal

from darling_nemo.judges.registry import JudgeKind, register_judge_kind
from darling_nemo.schema import Strict


class FirstWordConfig(Strict):
    kind: Literal["first_word"] = "first_word"
    threshold: float = 0.5


class FirstWord:
    pairs_seen = 0

    def __init__(self, cfg):
        pass

    def __call__(self, pairs):
        FirstWord.pairs_seen += len(pairs)
        return [float(a.split()[:1] == b.split()[:1]) for a, b in pairs]


register_judge_kind(JudgeKind(FirstWordConfig, build=FirstWord))
"""

TOY_METHOD = """
from darling_nemo.methods import register_method
from darling_nemo.methods.base import Key, Method, each_group

calls = []


def group_rewards(group, settings):
    calls.append(len(group.quality))
    return group.quality * (1.0 + settings.keys["bonus"] * group.diversity)


register_method(
    Method(
        "diverse_bonus",
        "quality times (1 + bonus x diversity)",
        each_group(group_rewards),
        keys=(Key("bonus", 0.5, "method diverse_bonus: the diversity bonus", ge=0.0),),
    )
)
"""

PLUGINS = {
    "plugin_words_task": TOY_TASK,
    "first_word_judge": TOY_JUDGE,
    "diverse_bonus_method": TOY_METHOD,
}


@pytest.fixture
def mine(tmp_path: Path):
    """A folder outside the clone holding the plugin files; afterwards everything they
    registered is removed and the modules forgotten, so the next test starts clean."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in PLUGINS.items():
        (folder / f"{name}.py").write_text(text)
    yield folder
    for name in PLUGINS:
        sys.modules.pop(name, None)
    if "plugin_words" in tasks.task_names():
        tasks.unregister_task("plugin_words")
    if "first_word" in judge_kind_names():
        unregister_judge_kind("first_word")
    if "diverse_bonus" in methods.method_names():
        methods.unregister_method("diverse_bonus")
    while str(folder.resolve()) in sys.path:
        sys.path.remove(str(folder.resolve()))


def trl_config(mine: Path, out: Path) -> Path:
    config = {
        "engine": "trl",
        "seed": 3,
        "output_dir": str(out),
        "torch_threads": 1,
        "policy": {"kind": "tiny"},
        "task": {"kind": "plugin_words", "words": 3},
        "trainer": {
            "max_steps": 2,
            "prompts_per_step": 2,
            "group_size": 4,
            "learning_rate": 1e-3,
            "max_completion_length": 8,
            "save_steps": 2,
        },
        "evaluation": {"every_steps": 0, "num_samples": 2, "pass_at_k": [1]},
        "logging": {"report_to": [], "progress_bar": False},
        "darling": {
            "plugins": list(PLUGINS),
            "plugin_path": [str(mine)],
            "judge": {"kind": "first_word"},
            "method": "diverse_bonus",
            "bonus": 0.25,
        },
    }
    path = mine / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_task_method_and_judge_from_your_folder_train_two_steps_then_leave(mine, tmp_path):
    out = tmp_path / "run"
    config = trl_config(mine, out)
    assert recipe_main("darling_task")(["--config", str(config)]) == 0
    train = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["darling/judge_calls"] > 0 for r in train)  # the plugin's judge was asked
    assert sys.modules["first_word_judge"].FirstWord.pairs_seen > 0
    assert sys.modules["diverse_bonus_method"].calls[:2] == [4, 4]  # once per group of 4
    saved = yaml.safe_load((out / "config.yaml").read_text())["darling"]
    assert (saved["method"], saved["bonus"]) == ("diverse_bonus", 0.25)
    assert "plugin_words" in tasks.task_names() and "first_word" in judge_kind_names()
    tasks.unregister_task("plugin_words")
    unregister_judge_kind("first_word")
    methods.unregister_method("diverse_bonus")
    with pytest.raises(ConfigError, match=r"darling\.judge\.kind: 'first_word' is not one of"):
        validate_darling({"judge": {"kind": "first_word"}})
    with pytest.raises(ConfigError, match=r"darling\.method: 'diverse_bonus' is not one of"):
        validate_darling({"method": "diverse_bonus"})


def test_a_nemo_rl_config_checks_with_your_judge_and_a_bad_plugin_is_one_line(mine, capsys):
    plugins = [f"darling.plugins=[{', '.join(PLUGINS)}]", f"darling.plugin_path=[{mine}]"]
    args = ["--config", str(REPO / "conf/math_qwen3_4b_darling.yaml"), "--dry-run", *plugins]
    yours = ["darling.judge={kind: first_word}", "darling.method=diverse_bonus"]
    assert recipe_main("darling_math")([*args, *yours]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["darling"]["judge"] == {"kind": "first_word"}
    assert printed["darling"]["method"] == "diverse_bonus"
    assert printed["darling"]["plugins"] == list(PLUGINS)
    assert recipe_main("darling_math")([*args[:3], "darling.plugins=[no_such_plugin]"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[-1] == (
        f"darling_math: {args[1]}: darling.plugins[0]: cannot import 'no_such_plugin' "
        "(searched first in .): ModuleNotFoundError: No module named 'no_such_plugin'"
    ), said


def test_plugins_given_as_a_string_are_refused_naming_the_key():
    """A bare string would be read a character at a time, each taken for a module."""
    with pytest.raises(ConfigError) as err:
        validate_darling({"plugins": "my_judge"})
    assert str(err.value) == "darling.plugins: a list of strings expected, got 'my_judge'"
    with pytest.raises(ConfigError, match=r"^darling\.plugin_path: a list of strings"):
        validate_darling({"plugins": ["my_judge"], "plugin_path": "."})


def nemo_rl_config(mine: Path, **task: object) -> Path:
    """The user-task NeMo-RL config copied into your folder with its task: section replaced
    by your task's (and your plugins named); its data path, `${task.data_path}` there, is
    left unset: a task trained from its section gives its own prompts."""
    cfg = yaml.safe_load(NEMO_RL_CONFIG.read_text())
    cfg["task"] = {"kind": "plugin_words", "words": 3, **task}
    cfg["data"]["train_data_path"] = None
    cfg["darling"].update(plugins=list(PLUGINS), plugin_path=[str(mine)])
    path = mine / "nemo_rl.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_your_task_passes_a_nemo_rl_configs_dry_run_and_a_shipped_one_is_refused(mine, capsys):
    config = nemo_rl_config(mine)
    assert recipe_main("darling_task")(["--config", str(config), "--dry-run"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["task"] == {"kind": "plugin_words", "words": 3}
    # a task NeMo-RL trains from its own data: and env: sections: one line naming task.kind
    assert recipe_main("darling_task")(["--config", str(config), "task={kind: math}"]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith(
        f"darling_task: {config}: task.kind: the math task trains on NeMo-RL from the data: "
        "and env: sections, not a task: section (one of "
    ), said
    assert "plugin_words" in said and "reward_funcs" in said
    assert recipe_main("darling_task")(["--config", str(config), "task.words=x"]) == 2
    assert "task.words" in capsys.readouterr().err


def test_your_tasks_rows_and_the_environment_that_scores_them(mine):
    """What NeMo-RL's dataset and the generic environment actor get of your task, without
    NeMo-RL: its TRL prompts as rows named by its kind, and its quality; the environment, in
    a process of its own, imports your plugins before it looks the task up."""
    from darling_nemo.nemo_rl.user_env import (
        UserRewards,
        dataset_rows,
        environment_config,
        plugins_config,
        task_section,
    )

    cfg = load_config(nemo_rl_config(mine, words=2))
    validate_darling(cfg["darling"])  # imports your plugins, as the recipe's check does
    section = task_section(cfg)
    rows = dataset_rows(section, cfg["grpo"]["seed"])
    assert rows == [  # prompts(.task, .seed): the first `words` of its prompts
        {"prompt": "say three words", "columns": {}, "row": "plugin_words prompt 1",
         "task_name": "plugin_words"},
        {"prompt": "say some words", "columns": {}, "row": "plugin_words prompt 2",
         "task_name": "plugin_words"},
    ]  # fmt: skip
    # as in the actor's process: the task is not registered there until the plugins import
    tasks.unregister_task("plugin_words")
    sys.modules.pop("plugin_words_task")
    plugins = plugins_config(cfg)
    assert plugins == {"plugins": list(PLUGINS), "plugin_path": [str(mine.resolve())]}
    rewards = UserRewards(environment_config(section), None, plugins)
    assert "plugin_words" in tasks.task_names()
    logs = [
        [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": said}]
        for row, said in zip(rows, ["one three two", "two"], strict=True)
    ]
    for log in logs:
        log[1]["token_ids"] = [1, 2]
    metadata = [{"prompt": r["prompt"], "columns": r["columns"], "row": r["row"]} for r in rows]
    assert rewards.score(logs, metadata) == [1.0, 0.0]
    metrics = rewards.pop_metrics()
    assert metrics["quality_seconds"] >= 0 and metrics["reward_timeouts"] == 0
    rewards.shutdown()


@pytest.mark.nemo_rl
def test_your_task_passes_the_rehearsals_prepare_phase(mine, tmp_path, capsys):
    """The rehearsal's prepare (tiny policy, shrunk config) of a NeMo-RL config training your
    task, and the shrunk config passes the recipe's --dry-run."""
    pytest.importorskip("nemo_rl")
    from darling_nemo.rehearsal.run import Rehearsal, prepare

    config = nemo_rl_config(mine)
    workdir = tmp_path / "rehearsal"
    workdir.mkdir()
    recipe = REPO / "recipes/darling_task.py"
    r = Rehearsal(recipe, str(config), [], "reward_funcs", workdir)
    path, given, shrunk = prepare(r, "http://127.0.0.1:1")
    assert given["task"] == shrunk["task"] == {"kind": "plugin_words", "words": 3}
    assert shrunk["policy"]["model_name"] == str(workdir / "policy")
    assert (workdir / "policy" / "config.json").is_file()
    assert shrunk["darling"]["plugins"] == list(PLUGINS)
    capsys.readouterr()
    assert recipe_main("darling_task")(["--config", str(path), "--dry-run"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["task"]["kind"] == "plugin_words"


@pytest.mark.nemo_rl
def test_your_task_trains_from_its_section_in_the_environment_actor_on_ray(
    mine, char_tokenizer_dir
):
    """NeMo-RL's dataset of your task (rows named by its kind, through the real processor)
    and the generic environment actor, another process, which imports your plugins from
    darling.plugin_path before it scores a batch with your task's quality."""
    pytest.importorskip("nemo_rl")
    import os
    import shutil
    import tempfile

    import ray
    from helpers import start_local_ray
    from transformers import AutoTokenizer

    from darling_nemo.nemo_rl.adapter import setup_data

    os.environ.setdefault("NEMO_RL_PY_EXECUTABLES_SYSTEM", "1")  # actors use this interpreter
    cfg = load_config(nemo_rl_config(mine))
    validate_darling(cfg["darling"])  # imports your plugins, as the recipe's check does
    tokenizer = AutoTokenizer.from_pretrained(char_tokenizer_dir)
    temp_dir = tempfile.mkdtemp(prefix="dn_ray_", dir="/tmp")
    start_local_ray(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir)
    try:
        dataset, val_dataset, task_to_env, _ = setup_data(tokenizer, cfg, "plugin_words")
        assert val_dataset is None and len(dataset) == 3 and list(task_to_env) == ["plugin_words"]
        assert dataset[0]["task_name"] == "plugin_words"
        assert dataset[0]["message_log"][0]["content"] == "<user>say three words\n<assistant>"
        logs = [
            [
                *({"role": m["role"], "content": m["content"]} for m in dataset[i]["message_log"]),
                {"role": "assistant", "content": text},
            ]
            for i, text in ((0, "three"), (1, "two"))
        ]
        metadata = [dataset[0]["extra_env_info"], dataset[1]["extra_env_info"]]
        result = ray.get(task_to_env["plugin_words"].step.remote(logs, metadata))
        assert result.rewards.tolist() == [1.0, 0.0]
        ray.get(task_to_env["plugin_words"].shutdown.remote())
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
