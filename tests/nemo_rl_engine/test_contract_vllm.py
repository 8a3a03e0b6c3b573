"""The generation engine's config as NeMo-RL v0.4.0's vLLM worker builds it, checked by vLLM
0.10.0's own code, on every NeMo-RL config in conf/ (sync and async engines) and on the
refusals a user would otherwise meet once the GPUs are allocated (docs/contracts.md).
Skipped unless containers/vllm_contract_env.sh installed vLLM beside this environment
(.ci/run does). One child process for all configs; the verdicts are cached for the
rehearsals after this file."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo_rl")
pytestmark = pytest.mark.nemo_rl

from helpers import REPO, needs_vllm_sources, verdicts_of_every_config  # noqa: E402

from darling_nemo.config import load_config  # noqa: E402
from darling_nemo.rehearsal import contract_vllm  # noqa: E402

NEEDS_VLLM = needs_vllm_sources()
MATH_4B = "math_qwen3_4b_darling.yaml"
LLAMA_70B = "wildchat_llama70b_darling.yaml"
GEN = "policy.generation"
# (config, overrides, the start of the verdict)
CASES = [
    (MATH_4B, [f"{GEN}.vllm_cfg.async_engine=false"], "PASS (Qwen/Qwen3-4B-Base: sync engine"),
    (
        MATH_4B,
        [f"{GEN}.vllm_cfg.max_model_len=65536", "policy.max_total_sequence_length=65536"],
        f"FAIL {GEN}.vllm_cfg.max_model_len=65536: User-specified max_model_len (65536) is "
        "greater than the derived max_model_len (max_position_embeddings=32768",
    ),
    (
        LLAMA_70B,
        [f"{GEN}.vllm_cfg.tensor_parallel_size=3"],
        f"FAIL {GEN}.vllm_cfg.tensor_parallel_size=3: Total number of attention heads (64) must "
        "be divisible by tensor parallel size (3).",
    ),
    (
        MATH_4B,
        [f"{GEN}.vllm_cfg.gpu_memory_utilization=1.5"],
        f"FAIL {GEN}.vllm_cfg.gpu_memory_utilization=1.5: GPU memory utilization must be less "
        "than 1.0. Got 1.5.",
    ),
    (
        MATH_4B,
        [f"{GEN}.vllm_kwargs={{max_num_seq: 64}}"],
        f"FAIL {GEN}.vllm_kwargs.max_num_seq: vLLM 0.10.0's engine arguments have no such field",
    ),
]


@NEEDS_VLLM
def test_every_config_passes_and_the_refusals_name_the_key() -> None:
    for _, verdict in verdicts_of_every_config(contract_vllm.check_many, CASES):
        assert verdict.startswith("PASS (") and "create_engine_config() passed" in verdict
        assert "async engine" in verdict and "load_format dummy" in verdict, verdict
    # the 70B job's engine, as the rehearsal prints it (from the cache filled above)
    line = contract_vllm.run(load_config(REPO / "conf" / LLAMA_70B))
    assert "max_model_len 1536" in line and "TP 8 x PP 1" in line, line


@NEEDS_VLLM
def test_a_rehearsal_stops_at_the_vllm_contract_naming_the_key() -> None:
    from darling_nemo.rehearsal.contract import contract_phase
    from darling_nemo.rehearsal.phases import RehearsalFailure

    with pytest.raises(RehearsalFailure) as failure:
        contract_phase(str(REPO / "conf" / LLAMA_70B), [f"{GEN}.vllm_cfg.tensor_parallel_size=3"])
    assert failure.value.phase == "contract (vllm)"
    assert failure.value.error.startswith(f"{GEN}.vllm_cfg.tensor_parallel_size=3:")


def test_without_vllm_the_phase_says_skipped_and_why(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(contract_vllm.sys, "prefix", str(tmp_path))
    verdict = contract_vllm.run(load_config(REPO / "conf" / MATH_4B))
    assert verdict.startswith("SKIPPED (vLLM 0.10.0 is not installed beside this environment")
