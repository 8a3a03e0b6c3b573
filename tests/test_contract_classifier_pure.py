"""The classifier contract's parts that need no NeMo-RL or vLLM (docs/contracts.md): which
server command line a config's job runs, and the config.json each reference classifier is
checked with. The contract itself runs in the NeMo-RL part
(tests/nemo_rl_engine/test_contract_classifier.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO

from darling_nemo.config import load_config
from darling_nemo.judges.auth import MIDDLEWARE
from darling_nemo.rehearsal.contract_classifier import (
    classifier_hf_config,
    job,
    middleware_problem,
    run,
)
from darling_nemo.rehearsal.contract_vllm import sources

CONF = REPO / "conf"
MODERNBERT = "dogtooth/similarity-classifier-f168-hf"
QWEN3_MATH = "dogtooth/qwen3-4b-emb-finetuned-step-70-hf"


def test_a_sub_job_is_checked_with_the_command_darling_serve_classifiers_runs(monkeypatch):
    monkeypatch.delenv("CLASSIFIER_MODEL", raising=False)
    one = job(load_config(CONF / "wildchat_llama70b_darling.yaml"))
    assert isinstance(one, dict)
    # slurm/train.sh serves the template's reference classifier (CFG_CLASSIFIER_MODEL)
    assert one["model"] == MODERNBERT
    assert one["serve_args"][:3] == [MODERNBERT, "--task", "classify"]
    assert "--served-model-name" in one["serve_args"]
    assert one["judge_max_length"] == 2048  # the modernbert template's budget
    # the launcher's CLASSIFIER_MODEL wins, as it does in slurm/train.sh
    monkeypatch.setenv("CLASSIFIER_MODEL", QWEN3_MATH)
    one = job(load_config(CONF / "wildchat_llama70b_darling.yaml"))
    assert isinstance(one, dict)
    assert (one["model"], one["model_key"]) == (QWEN3_MATH, "CLASSIFIER_MODEL")


def test_a_launching_config_is_checked_with_its_own_server_command():
    cfg = load_config(
        CONF / "math_qwen3_1p7b_1node_darling.yaml",
        ["darling.judge.launch.extra_args=[--max-num-seqs, '64']"],
    )
    one = job(cfg)
    assert isinstance(one, dict)
    assert one["model_key"] == "darling.judge.launch.model"
    assert one["serve_args"][-2:] == ["--max-num-seqs", "64"]
    assert one["extra_key"] == "darling.judge.launch.extra_args=['--max-num-seqs', '64']"
    # the config sets launch.max_model_len, so a budget refusal names that key
    assert one["max_len_key"].startswith("darling.judge.launch.max_model_len=")
    assert one["judge_max_length"] == 4096  # qwen3_math


@pytest.mark.parametrize(
    "config", ["wildchat_llama70b_darling.yaml", "math_qwen3_1p7b_1node_darling.yaml"]
)
def test_every_server_command_checks_the_jobs_token(config):
    # the .sub jobs' darling-serve-classifiers and the recipe's own server
    args = job(load_config(CONF / config))["serve_args"]
    assert args[args.index("--middleware") + 1] == MIDDLEWARE


def test_the_contract_refuses_a_server_without_the_token_middleware():
    assert middleware_problem([MIDDLEWARE]) == ""
    assert middleware_problem([]) == (
        f"the server has no `--middleware {MIDDLEWARE}`: it would answer /classify without "
        "the job's token"
    )
    assert middleware_problem(None) == "vLLM 0.10.0's serve parser has no --middleware list"


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (["darling.judge={kind: lexical}"], "judge 'lexical' starts no classifier server"),
        (
            ["darling.judge.launch.executable=python -m darling_nemo.classify_server"],
            "darling.judge.launch.executable is 'python -m darling_nemo.classify_server', not vLLM",
        ),
    ],
)
def test_nothing_to_check_says_why(overrides, why):
    cfg = load_config(CONF / "math_qwen3_1p7b_1node_darling.yaml", overrides)
    assert job(cfg) == why
    assert run(cfg) == f"SKIPPED ({why})"


def test_without_vllm_the_phase_says_skipped_and_how_to_install_it():
    assert sources()[0] is None  # the project's dev environment has no vLLM
    line = run(load_config(CONF / "math_qwen3_4b_darling.yaml"))
    assert line.startswith("SKIPPED (vLLM 0.10.0 is not installed") and "vllm_contract_env" in line


@pytest.mark.parametrize(
    ("model", "architecture", "model_type"),
    [
        (MODERNBERT, "ModernBertForSequenceClassification", "modernbert"),
        (QWEN3_MATH, "Qwen3ForSequenceClassification", "qwen3"),
    ],
)
def test_the_reference_classifiers_config_json_comes_from_the_architecture_table(
    model, architecture, model_type
):
    config = classifier_hf_config(model, "darling.judge.launch.model")
    assert config["architectures"] == [architecture] and config["model_type"] == model_type
    assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1"}  # label 1 = similar


def test_a_local_classifier_is_checked_with_its_own_config_json(tmp_path: Path):
    own = {"architectures": ["Qwen3Model"], "model_type": "qwen3"}
    (tmp_path / "config.json").write_text(json.dumps(own))
    assert classifier_hf_config(str(tmp_path), "darling.judge.launch.model") == own
