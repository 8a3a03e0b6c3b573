"""Your own task, method and judge from a folder of your own: each one file that registers
itself when imported, named in `darling.plugins`, used end to end (a TRL run of 2 steps
through the recipe; a NeMo-RL config's --dry-run), then unregistered and refused again.
The folder is a temporary one outside the clone, with nothing of the package edited."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from test_cli import recipe_main

from darling_nemo import methods, tasks
from darling_nemo.judges.registry import judge_kind_names, unregister_judge_kind
from darling_nemo.schema import ConfigError, validate_darling

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
        prompts=lambda cfg: Prompts(PROMPTS[:3], PROMPTS[3:], WORDS),
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
