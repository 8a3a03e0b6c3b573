"""NeMo-RL v0.4.0's own MegatronPolicyWorker configuration path, with the pinned Megatron-LM and
Megatron-Bridge, on every NeMo-RL config in conf/ and on the refusals a user would first meet
on the GPUs (docs/contracts.md). Skipped unless containers/megatron_contract_env.sh installed
the sources into this environment (.ci/run does, from the archives CI keeps).

All configs go through one child process (Megatron's import costs 20-40 s once); the verdicts
are cached, so the rehearsals after this file reuse them."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo_rl")
pytestmark = pytest.mark.nemo_rl

from helpers import REPO, verdicts_of_every_config  # noqa: E402

from darling_nemo.config import load_config  # noqa: E402
from darling_nemo.rehearsal import contract_megatron_worker as worker  # noqa: E402

FOUND, WHY = worker.sources()
needs_sources = pytest.mark.skipif(FOUND is None, reason=WHY)
MATH_4B = "math_qwen3_4b_darling.yaml"
LLAMA_70B = "wildchat_llama70b_darling.yaml"
# (config, overrides, the start of the FAIL line)
NEGATIVES = [
    (
        LLAMA_70B,
        ["policy.megatron_cfg.tensor_model_parallel_size=3"],
        "FAIL policy.megatron_cfg.tensor_model_parallel_size=3: num_attention_heads (64) must "
        "be a multiple of tensor_model_parallel_size (3)",
    ),
    (
        MATH_4B,
        ["policy.megatron_cfg.context_parallel_size=2", "policy.sequence_packing.enabled=false"],
        "FAIL policy.megatron_cfg.context_parallel_size=2: Sequence Packing must be enabled",
    ),
    (
        MATH_4B,
        ["policy.megatron_cfg.optimizer.use_distributed_optimizer=false"],
        "FAIL policy.megatron_cfg.optimizer.use_distributed_optimizer=False: "
        "--use-precision-aware-optimizer only supported with distributed optimizer",
    ),
    (
        MATH_4B,
        ["+policy.megatron_cfg.optimizer.lrr=0.1"],
        "FAIL policy.megatron_cfg.optimizer.lrr: OptimizerConfig has no such field",
    ),
    (
        MATH_4B,
        ["+policy.megatron_cfg.scheduler.lr_warmup_iter=3"],
        "FAIL policy.megatron_cfg.scheduler.lr_warmup_iter: SchedulerConfig has no such field",
    ),
]


@needs_sources
def test_every_config_passes_and_the_refusals_name_the_key() -> None:
    for _, verdict in verdicts_of_every_config(worker.check_many, NEGATIVES):
        assert verdict.startswith("PASS (") and "validate() passed" in verdict, verdict
    # what the rehearsal prints, from the cache the call above filled
    line = worker.run(load_config(REPO / "conf" / LLAMA_70B))
    assert "32 GPUs = TP 4 x PP 4 x CP 1 x DP 2, SP True" in line, line


@needs_sources
def test_a_rehearsal_stops_at_the_worker_contract_naming_the_key() -> None:
    from darling_nemo.rehearsal.contract import contract_phase
    from darling_nemo.rehearsal.phases import RehearsalFailure

    with pytest.raises(RehearsalFailure) as failure:
        contract_phase(
            str(REPO / "conf" / LLAMA_70B), ["policy.megatron_cfg.tensor_model_parallel_size=3"]
        )
    assert failure.value.phase == "contract (megatron)"
    assert failure.value.error.startswith("policy.megatron_cfg.tensor_model_parallel_size=3:")


def test_without_the_sources_the_phase_says_skipped_and_why(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(worker.sys, "prefix", str(tmp_path))
    verdict = worker.run(load_config(REPO / "conf" / MATH_4B))
    assert verdict.startswith("SKIPPED (the pinned Megatron-LM and Megatron-Bridge sources")
