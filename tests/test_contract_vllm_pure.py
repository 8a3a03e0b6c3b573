"""The vLLM contract's parts that need no NeMo-RL or vLLM (docs/contracts.md): naming the key
of a refusal and finding vLLM 0.10.0. The contract itself runs in the NeMo-RL part
(tests/nemo_rl_engine/test_contract_vllm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from darling_nemo.rehearsal.contract_vllm import SOURCES_FILE, name_the_key, sources

GENERATION = {
    "vllm_cfg": {"max_model_len": 65536, "tensor_parallel_size": 3, "gpu_memory_utilization": 1.5},
    "vllm_kwargs": {"max_num_seq": 64},
}


@pytest.mark.parametrize(
    ("message", "line"),
    [
        # vLLM 0.10.0's ModelConfig, through pydantic (the text after "Value error, ")
        (
            "1 validation error for ModelConfig\n  Value error, User-specified max_model_len "
            "(65536) is greater than the derived max_model_len [type=value_error, input_value=...",
            "policy.generation.vllm_cfg.max_model_len=65536: User-specified max_model_len "
            "(65536) is greater than the derived max_model_len",
        ),
        (
            "Total number of attention heads (64) must be divisible by tensor parallel size (3).",
            "policy.generation.vllm_cfg.tensor_parallel_size=3: Total number of attention heads "
            "(64) must be divisible by tensor parallel size (3).",
        ),
        (
            "GPU memory utilization must be less than 1.0. Got 1.5.",
            "policy.generation.vllm_cfg.gpu_memory_utilization=1.5: GPU memory utilization must "
            "be less than 1.0. Got 1.5.",
        ),
        (
            "AsyncEngineArgs.__init__() got an unexpected keyword argument 'max_num_seq'",
            "policy.generation.vllm_kwargs.max_num_seq: vLLM 0.10.0's engine arguments have no "
            "such field (a typo?)",
        ),
        ("anything else", "policy.generation.vllm_cfg: anything else"),
    ],
)
def test_a_refusal_names_the_key_and_its_value(message: str, line: str) -> None:
    assert name_the_key(ValueError(message), GENERATION) == line


def test_sources_say_why_vllm_is_missing_or_wrong(tmp_path: Path) -> None:
    # this environment has no vLLM installed (the project's dev environment)
    found, why = sources(str(tmp_path))
    assert found is None and "containers/vllm_contract_env.sh" in why
    site = tmp_path / "vllm-site"
    site.mkdir()
    (tmp_path / SOURCES_FILE).write_text(json.dumps({"vllm": "0.11.0", "site": str(site)}))
    found, why = sources(str(tmp_path))
    assert found is None and "not vLLM 0.10.0" in why
    (tmp_path / SOURCES_FILE).write_text(json.dumps({"vllm": "0.10.0", "site": str(site)}))
    assert sources(str(tmp_path)) == ([str(site)], "")
