"""Adding a judge is one module and one registry entry (darling_nemo/judges/registry.py).

`toy_judge.py` beside this file is that module; registered for the duration of each test,
the toy kind runs through `darling-score`, a TRL smoke run, the config check (`--dry-run`)
and the rehearsal's shrink, and no other project file knows it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from test_cli import recipe_main
from toy_judge import TOY, ToyJudge

from darling_nemo.config import load_config
from darling_nemo.judges import make_judge
from darling_nemo.judges.registry import judge_kind, judge_kind_names, registered_judge_kind
from darling_nemo.rehearsal.shrink import shrink_overrides
from darling_nemo.schema import ConfigError, validate_darling
from darling_nemo.score import main as score_main

BUILTIN = ("lexical", "cross_encoder", "embedding", "served", "ray_pool")
NEMO_RL_CONFIG = "conf/math_qwen3_4b_darling.yaml"


@pytest.fixture
def toy():
    ToyJudge.pairs_seen = 0
    with registered_judge_kind(TOY) as entry:
        yield entry


def test_the_schema_takes_a_registered_kind_and_refuses_it_again_after(toy):
    assert judge_kind_names() == (*BUILTIN, "toy")
    darling = validate_darling({"judge": {"kind": "toy", "words": 2}})
    assert darling.judge.words == 2 and judge_kind(darling.judge) is toy
    with pytest.raises(ConfigError, match=r"darling\.judge\.wrds: unknown key; did you mean"):
        validate_darling({"judge": {"kind": "toy", "wrds": 2}})
    assert make_judge(darling.judge)([("a b c", "a b d"), ("a b", "x b")]) == [1.0, 0.0]


def test_an_unregistered_kind_is_refused_with_the_builtin_kinds_listed():
    assert judge_kind_names() == BUILTIN
    with pytest.raises(ConfigError) as err:
        validate_darling({"judge": {"kind": "toy"}})
    assert str(err.value) == (
        "darling.judge.kind: 'toy' is not one of lexical, cross_encoder, embedding, served, "
        "ray_pool"
    )


def score(tmp_path: Path, *args: str) -> tuple[int, list[dict]]:
    groups = tmp_path / "g.jsonl"
    words = "alpha beta gamma delta epsilon zeta"
    row = {
        "prompt": "say six words and one more",
        "responses": [f"{words} one", f"{words} two", "omega psi chi phi upsilon tau three"],
        "quality": [1, 1, 1],
    }
    groups.write_text(json.dumps(row) + "\n")
    out = io.StringIO()
    code = score_main([str(groups), *args], stdout=out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_darling_score_judges_with_the_toy_kind(toy, tmp_path, capsys):
    code, rows = score(tmp_path, "--judge", "lexical")
    assert code == 0 and rows[0]["num_classes"] == 3  # the rules keep long answers apart
    code, rows = score(tmp_path, "--judge", "toy")
    assert code == 0 and rows[0]["num_classes"] == 2  # the toy joins the two "alpha" answers
    assert ToyJudge.pairs_seen > 0
    assert "(judge: toy)" in capsys.readouterr().err
    # its model files reach the config check: a missing folder is one line, exit 2
    missing = tmp_path / "no-such-vocabulary"
    code, _ = score(tmp_path, "--judge", "toy", "--judge-set", f"vocabulary={missing}")
    assert code == 2
    assert f"judge.vocabulary: no such model folder {missing}" in capsys.readouterr().err


def test_a_trl_smoke_run_trains_with_the_toy_kind(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    out = tmp_path / "math"
    args = ["--config", "conf/local/math_trl.yaml", f"output_dir={out}", "+torch_threads=1"]
    args += ["trainer.max_steps=2", "darling.judge={kind: toy, words: 2}"]
    assert recipe_main("darling_math")(args) == 0
    train = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["darling/judge_calls"] > 0 for r in train)
    assert ToyJudge.pairs_seen > 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["darling"]["judge"]["kind"] == "toy"


def test_the_config_check_and_the_shrink_of_a_nemo_rl_config_take_the_toy_kind(toy, capsys):
    judge = "darling.judge={kind: toy, words: 3}"
    assert recipe_main("darling_math")(["--config", NEMO_RL_CONFIG, "--dry-run", judge]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["darling"]["judge"] == {"kind": "toy", "words": 3}
    changes = shrink_overrides(
        load_config(REPO / NEMO_RL_CONFIG, [judge]),
        policy_dir="/tiny/policy",
        reward_model_dir=None,
        train_data="/r/train.jsonl",
        val_data="/r/val.jsonl",
        workdir="/r",
        judge_url="http://127.0.0.1:1",
        classifier_dir=None,
    )
    judge_changes = [(key, value) for key, value in changes if key.startswith("darling.judge")]
    assert judge_changes == [("darling.judge.words", 1)]  # the toy's own stand-in
