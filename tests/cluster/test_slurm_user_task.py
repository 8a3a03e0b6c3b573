"""A user's own task, in a folder outside the checkout, through slurm/code_tests.sub's dry
run against the fake SLURM of test_slurm.py: USER_DIR mounted at the same path in every
container (a printed mount line), an absolute CONFIG, and the reward functions checked by the
recipe's own dry run here, where NeMo-RL does not import (docs/your-own-task.md)."""

from __future__ import annotations

import json
import os
import textwrap

import yaml
from helpers import REPO
from test_slurm import by_role, cluster  # noqa: F401 (cluster: a fixture)

REWARDS = '''
import json


def json_valid(prompts, completions, **kwargs):
    """1.0 where the completion parses as JSON, else 0.0."""
    scores = []
    for completion in completions:
        try:
            json.loads(completion)
            scores.append(1.0)
        except ValueError:
            scores.append(0.0)
    return scores


def has_key(prompts, completions, key, **kwargs):
    """1.0 where the completion's JSON object has the row's key; None where it is not JSON."""
    scores = []
    for completion, wanted in zip(completions, key):
        try:
            value = json.loads(completion)
        except ValueError:
            scores.append(None)
            continue
        scores.append(float(isinstance(value, dict) and wanted in value))
    return scores
'''


def user_task(folder):
    """A task folder as a user writes one: a reward module, a JSONL and a NeMo-RL config copied
    from the shipped example, its task section pointed at the folder by ${oc.env:USER_DIR}."""
    folder.mkdir()
    (folder / "json_rewards.py").write_text(textwrap.dedent(REWARDS))
    rows = [
        {"id": f"json-{i}", "prompt": f"Answer in JSON with the key k{i}.", "key": f"k{i}"}
        for i in range(8)
    ]
    (folder / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = yaml.safe_load((REPO / "conf/code_tests_qwen3_1p7b_darling.yaml").read_text())
    config["task"].update(
        data_path="${oc.env:USER_DIR}/prompts.jsonl",
        python_path=["${oc.env:USER_DIR}"],
        reward_funcs=["json_rewards:json_valid", "json_rewards:has_key"],
        reward_weights=[1.0, 0.5],
    )
    (folder / "nemo.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder / "nemo.yaml"


def test_a_task_outside_the_checkout_is_mounted_and_its_functions_checked(cluster):  # noqa: F811
    task = cluster.path / "my_task"
    config = user_task(task)
    env = cluster.job("code_tests.sub", nodes=1, USER_DIR=str(task), CONFIG=str(config))
    res = cluster.run("code_tests.sub", env, "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"darling: mount: {task} -> {task}" in res.stdout.splitlines()
    roles = by_role(res.stdout)
    for options, _, _ in [step for steps in roles.values() for step in steps]:
        assert f"{task}:{task}" in options["container-mounts"].split(",")
    ((_, _, driver),) = roles["driver"]
    assert driver[2:5] == ["recipes/darling_task.py", "--config", str(config)]
    # the recipe's dry run ran here and called each function once on the first prompt
    checked = [line for line in res.stdout.splitlines() if line.startswith("checked ")]
    assert any("json_rewards:json_valid" in line for line in checked), res.stdout
    assert any("json_rewards:has_key" in line for line in checked), res.stdout

    funcs = "task.reward_funcs=[json_rewards:json_vaild,json_rewards:has_key]"
    misspelt = cluster.run("code_tests.sub", env, "--dry-run", funcs)
    assert misspelt.returncode == 2, misspelt.stdout + misspelt.stderr
    (error,) = [line for line in misspelt.stderr.splitlines() if "darling: error:" in line]
    assert "json_rewards:json_vaild" in error and "json_rewards has no 'json_vaild'" in error


def test_an_absolute_config_outside_every_mount_is_refused(cluster):  # noqa: F811
    config = user_task(cluster.path / "my_task")
    env = cluster.job("code_tests.sub", nodes=1, CONFIG=str(config))
    res = cluster.run("code_tests.sub", env, "--dry-run")
    assert res.returncode == 2
    assert f"CONFIG={config} is in no folder the containers mount: set USER_DIR" in res.stderr
    # a relative path out of the checkout is the absolute path it names, refused the same way
    env["CONFIG"] = os.path.relpath(config, REPO)
    res = cluster.run("code_tests.sub", env, "--dry-run")
    assert res.returncode == 2
    assert f"CONFIG={config} is in no folder the containers mount: set USER_DIR" in res.stderr
    relative = cluster.job("code_tests.sub", nodes=1, USER_DIR="my_task")
    res = cluster.run("code_tests.sub", relative, "--dry-run")
    assert res.returncode == 2
    assert "USER_DIR=my_task: must be an absolute path" in res.stderr
