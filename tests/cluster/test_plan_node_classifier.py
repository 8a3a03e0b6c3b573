"""darling-plan with the one-node configs' own classifier server (darling.judge.launch): its
claim is on the GPU it shares for the whole run, so every phase carries it; the plan still
fits 80 GB. And the rehearsal's shrink points the launch at the CPU stand-in."""

from __future__ import annotations

import sys

import pytest
from helpers import REPO

from darling_nemo.config import load_config
from darling_nemo.plan import GIB, STANDARD_GPUS, main, make_plan
from darling_nemo.rehearsal.shrink import shrink_overrides

H100 = STANDARD_GPUS["80 GB (H100)"]  # 81,559 MiB = 79.65 GiB
CONFIGS = {
    # config: (its classifier, its gpu_memory_utilization)
    "wildchat_qwen3_1p7b_1node_darling.yaml": ("dogtooth/similarity-classifier-f168-hf", 0.06),
    "math_qwen3_1p7b_1node_darling.yaml": ("dogtooth/qwen3-4b-emb-finetuned-step-70-hf", 0.2),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_server_is_counted_on_every_phase_and_the_plan_fits_80gb(name):
    cfg = load_config(REPO / "conf" / name)
    model, utilization = CONFIGS[name]
    with_server = make_plan(cfg, H100)
    cfg["darling"]["judge"] = {"kind": "embedding"}  # the same run judged in the driver
    without = make_plan(cfg, H100)
    claim = utilization * H100 * GIB  # e.g. 0.06 x 79.65 GiB = 4.78 GiB (WildChat)
    shared = {p.name: p.total for p in with_server.phases if p.name != "classifier (node)"}
    assert shared.keys() == {p.name for p in without.phases}
    for phase in without.phases:
        assert shared[phase.name] == pytest.approx(phase.total + claim)
    own = next(p for p in with_server.phases if p.name == "classifier (node)")
    assert model in own.where and own.extra_check[0]  # the claim holds the classifier
    assert with_server.verdict()[0]  # fits 80 GB


def test_a_claim_too_big_for_the_gpu_does_not_fit():
    cfg = load_config(
        REPO / "conf/math_qwen3_1p7b_1node_darling.yaml",
        ["darling.judge.launch.gpu_memory_utilization=0.45"],
    )
    # generation: 0.6 x 79.65 (policy vLLM) + 2.10 (Megatron asleep) + 0.45 x 79.65 = 85.7 GiB
    assert not make_plan(cfg, H100).verdict()[0]


def test_the_math_classifier_needs_its_max_model_len():
    # vLLM's default for the math classifier, its own 40,960 positions, does not fit its claim
    cfg = load_config(
        REPO / "conf/math_qwen3_1p7b_1node_darling.yaml",
        ["darling.judge.launch.max_model_len=null"],
    )
    own = next(p for p in make_plan(cfg, H100).phases if p.name == "classifier (node)")
    assert not own.extra_check[0] and "40,960" in own.extra_check[1]


def test_the_command_says_it_fits(capsys):
    assert main(["conf/wildchat_qwen3_1p7b_1node_darling.yaml", "--check"]) == 0
    out = capsys.readouterr().out
    assert "classifier server" in out and "[classifier (node)]" in out
    assert "80 GB (H100)       (79.6 GiB): fits" in out


@pytest.mark.parametrize("name", CONFIGS)
def test_the_rehearsal_runs_the_recipes_own_server_on_cpu(name):
    cfg = load_config(REPO / "conf" / name)
    changes = dict(
        shrink_overrides(
            cfg,
            policy_dir="/tmp/p",
            reward_model_dir="/tmp/rm",
            train_data="/tmp/t.jsonl",
            val_data="/tmp/v.jsonl",
            workdir="/tmp/w",
            judge_url="http://127.0.0.1:4567",
            classifier_dir="/tmp/clf",
        )
    )
    assert changes["darling.judge.launch.model"] == "/tmp/clf"
    assert changes["darling.judge.launch.port"] == 4567
    assert changes["darling.judge.launch.needs_gpu"] is False
    assert changes["darling.judge.launch.executable"] == (
        f"{sys.executable} -m darling_nemo.classify_server"
    )
    assert "darling.judge.endpoints" not in changes  # they follow from the launch
    # the stand-in caches prefixes in blocks the shrunk judge's ~8 tokens per response fill
    assert changes["darling.judge.launch.extra_args"][-2:] == ["--block-size", "4"]
