"""The Megatron worker contract's parts that need no NeMo-RL or Megatron (docs/contracts.md):
naming the key of a refusal, the config.json it imports from, where the sources come from,
and the script that installs them. The contract itself runs in the NeMo-RL part
(tests/nemo_rl_engine/test_contract_megatron_worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

from darling_nemo.config import load_config
from darling_nemo.plan.architectures import KNOWN_MODELS
from darling_nemo.plan.layout import policy_world_size
from darling_nemo.rehearsal.contract_megatron_worker import (
    PINNED,
    SOURCES_FILE,
    hf_config,
    name_the_key,
    sources,
)

POLICY = {
    "model_name": "meta-llama/Llama-3.3-70B-Instruct",
    "megatron_cfg": {
        "tensor_model_parallel_size": 3,
        "pipeline_model_parallel_size": 4,
        "context_parallel_size": 2,
        "optimizer": {"use_distributed_optimizer": False},
    },
}


def raised(err: Exception) -> Exception:
    try:
        raise err
    except Exception as caught:
        return caught


@pytest.mark.parametrize(
    ("message", "starts"),
    [
        # Megatron-Core's TransformerConfig
        (
            "num_attention_heads (64) must be a multiple of tensor_model_parallel_size (3).",
            "policy.megatron_cfg.tensor_model_parallel_size=3: num_attention_heads (64)",
        ),
        # NeMo-RL's own assert in the worker
        (
            "Sequence Packing must be enabled to use Context Parallelism with MCore",
            "policy.megatron_cfg.context_parallel_size=2: Sequence Packing",
        ),
        # Megatron-Bridge's validate(): names TP, PP and CP too, but it is the world size
        (
            "\n  world size (48) is not divisible by total_model_size "
            "(model_cfg.tensor_model_parallel_size=3 * ...)",
            "cluster (the policy's 48 GPUs): world size (48) is not divisible",
        ),
        (
            "--use-precision-aware-optimizer only supported with distributed optimizer",
            "policy.megatron_cfg.optimizer.use_distributed_optimizer=False: --use-precision",
        ),
        ("something else", "policy.megatron_cfg (TP 3 PP 4 CP 2, world size 48): something else"),
    ],
)
def test_a_refusal_names_the_key_and_its_value(message: str, starts: str) -> None:
    line = name_the_key(raised(AssertionError(message)), POLICY, 48)
    assert line.startswith(starts), line
    # where it came from: this file, the raise's site
    assert line.endswith("]") and f"{Path(__file__).name}:" in line


@pytest.mark.parametrize("section", ["Optimizer", "Scheduler"])
def test_a_misspelt_optimizer_or_scheduler_key_is_named(section: str) -> None:
    err = raised(TypeError(f"{section}Config.__init__() got an unexpected keyword argument 'lrr'"))
    line = name_the_key(err, POLICY, 8)
    assert line.startswith(f"policy.megatron_cfg.{section.lower()}.lrr: {section}Config has no")


def test_config_json_comes_from_the_architecture_table() -> None:
    qwen = hf_config("Qwen/Qwen3-4B-Base")
    arch = KNOWN_MODELS["Qwen/Qwen3-4B-Base"]
    assert qwen["architectures"] == ["Qwen3ForCausalLM"] and qwen["model_type"] == "qwen3"
    assert (qwen["num_hidden_layers"], qwen["num_attention_heads"]) == (36, 32)
    assert qwen["tie_word_embeddings"] is arch.tied_embeddings is True
    llama = hf_config("meta-llama/Llama-3.3-70B-Instruct")
    assert llama["architectures"] == ["LlamaForCausalLM"] and llama["num_hidden_layers"] == 80
    assert llama["rope_scaling"]["rope_type"] == "llama3"


def test_a_local_models_own_config_json_is_used(tmp_path: Path) -> None:
    own = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 3, "custom": 1}
    (tmp_path / "config.json").write_text(json.dumps(own))
    assert hf_config(str(tmp_path)) == own


def test_policy_world_size_by_hand() -> None:
    # 70B WildChat: 5 nodes x 8; the reward model takes 1 node, generation is colocated
    # -> the policy has 4 nodes x 8 = 32 GPUs (TP 4 x PP 4 x DP 2).
    cfg = load_config(REPO / "conf" / "wildchat_llama70b_darling.yaml")
    assert (cfg["cluster"]["num_nodes"], cfg["cluster"]["gpus_per_node"]) == (5, 8)
    assert policy_world_size(cfg) == 32
    # the math 4B config: 8 nodes x 8, colocated, no reward model -> 64
    assert policy_world_size(load_config(REPO / "conf" / "math_qwen3_4b_darling.yaml")) == 64


def test_sources_say_why_they_are_missing_or_wrong(tmp_path: Path) -> None:
    found, why = sources(str(tmp_path))
    assert found is None and "containers/megatron_contract_env.sh" in why
    lm, bridge = tmp_path / "lm", tmp_path / "bridge"
    lm.mkdir(), bridge.mkdir()
    record = {
        "Megatron-LM": {"path": str(lm), "commit": PINNED["Megatron-LM"]},
        "Megatron-Bridge": {"path": str(bridge), "commit": "0" * 40},
    }
    (tmp_path / SOURCES_FILE).write_text(json.dumps(record))
    found, why = sources(str(tmp_path))
    assert found is None and f"Megatron-Bridge is at {'0' * 40}, not the pinned" in why
    record["Megatron-Bridge"]["commit"] = PINNED["Megatron-Bridge"]
    (tmp_path / SOURCES_FILE).write_text(json.dumps(record))
    # the folders to import from: Megatron-LM's root, Megatron-Bridge's src/
    roots = {"Megatron-LM": str(lm), "Megatron-Bridge": str(bridge / "src")}
    assert sources(str(tmp_path)) == (roots, "")


def _installed_copy(root: Path, bridge_version: str) -> None:
    """megatron/core and megatron/bridge as an installed environment holds them."""
    for package, version in (("core", ("0", "15", "0", "rc3")), ("bridge", bridge_version)):
        folder = root / "megatron" / package
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        major, minor, patch, pre = version
        (folder / "package_info.py").write_text(
            f"MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = '{pre}'\n"
        )


@pytest.mark.parametrize("bridge_version", [("0", "1", "0", "rc0"), ("0", "1", "0", "rc1")])
def test_an_installed_copy_is_used_at_the_pinned_versions_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bridge_version: tuple[str, ...]
) -> None:
    # NeMo-RL's container installs both packages; no sources file there.
    _installed_copy(tmp_path / "site", bridge_version)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        found, why = sources(str(tmp_path / "env"))
    finally:
        for name in [m for m in sys.modules if m == "megatron" or m.startswith("megatron.")]:
            del sys.modules[name]
    if bridge_version[3] == "rc0":
        site = str(tmp_path / "site")
        assert (found, why) == ({"Megatron-LM": site, "Megatron-Bridge": site}, "")
    else:
        assert found is None
        assert why == (
            "megatron.bridge 0.1.0rc1 is installed here, not NeMo-RL v0.4.0's pin 0.1.0rc0 "
            "(Megatron-Bridge 62f4704)"
        )


def _archive_of_a_new_commit(folder: Path) -> Path:
    """A `git archive` .tar.gz of a one-file repository: its commit is not a pin."""
    repo = folder / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    archive = folder / "lm.tar.gz"
    subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar.gz", "-o", str(archive), "HEAD"],
        check=True,
    )
    return archive


def test_env_script_refuses_a_source_at_another_commit(tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "python").symlink_to(sys.executable)
    (env_dir / "constraints.txt").write_text("")
    archive = _archive_of_a_new_commit(tmp_path)
    proc = subprocess.run(
        [REPO / "containers" / "megatron_contract_env.sh", archive, archive, env_dir],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"not at NeMo-RL v0.4.0's pin {PINNED['Megatron-LM']}" in proc.stderr
    assert not (env_dir / SOURCES_FILE).exists()  # nothing recorded


def test_env_script_needs_the_nemo_rl_environment_first(tmp_path: Path) -> None:
    proc = subprocess.run(
        [REPO / "containers" / "megatron_contract_env.sh", "a", "b", tmp_path / "none"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "run containers/nemo_rl_cpu_env.sh first" in proc.stderr
