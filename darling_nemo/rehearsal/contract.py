"""The rehearsal's first phase: contracts checked before Ray starts (docs/contracts.md).

Prints `phase contract (megatron): PASS (...)` for the checks NeMo-RL's Megatron worker leaves
to the GPUs, then `phase contract (megatron worker): PASS (...)` for NeMo-RL v0.4.0's own
worker configuration path with the pinned Megatron sources, and `phase contract (vllm): PASS
(...)` for the generation engine's config as NeMo-RL's vLLM worker builds it, checked by vLLM
0.10.0's own code, and `phase contract (vllm classify): PASS (...)` for the classifier servers'
command line and the /classify protocol, checked by vLLM 0.10.0's serve parser, engine config
and protocol classes; each says `SKIPPED (why)` where its libraries are not installed. A failure
is `rehearsal: FAIL at contract (megatron|vllm): <key>: ...`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from darling_nemo.config import load_config
from darling_nemo.rehearsal import (
    contract_classifier,
    contract_megatron,
    contract_megatron_worker,
    contract_vllm,
)
from darling_nemo.rehearsal.contract_child import ContractError
from darling_nemo.rehearsal.phases import RehearsalFailure


def contract_phase(config_path: str, overrides: Sequence[str]) -> None:
    """Raises run.RehearsalFailure naming the contract and the key."""
    cfg = load_config(config_path, overrides)
    for name, contract, check in (
        ("megatron", "megatron", contract_megatron.run),
        ("megatron worker", "megatron", contract_megatron_worker.run),
        ("vllm", "vllm", contract_vllm.run),
        ("vllm classify", "vllm", contract_classifier.run),
    ):
        t0 = time.monotonic()
        try:
            outcome = check(cfg)
        except ContractError as err:
            raise RehearsalFailure(f"contract ({contract})", str(err)) from None
        print(f"phase contract ({name}): {outcome} ({time.monotonic() - t0:.1f} s)", flush=True)
