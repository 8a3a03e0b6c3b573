"""The rehearsal's first phase: contracts checked before Ray starts (docs/contracts.md).

Prints `phase contract (megatron): PASS (...)` for the checks NeMo-RL's Megatron worker leaves
to the GPUs, then `phase contract (megatron worker): PASS (...)` for NeMo-RL v0.4.0's own
worker configuration path with the pinned Megatron sources, or `SKIPPED (why)` where they are
not installed. A failure of either is `rehearsal: FAIL at contract (megatron): <key>: ...`.
The vLLM half (engine config and the classifier servers' command lines with vLLM 0.10.0's own
code) is not built yet: it says so instead of passing silently.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from darling_nemo.config import load_config


def contract_phase(config_path: str, overrides: Sequence[str]) -> None:
    """Raises run.RehearsalFailure naming the contract and the key."""
    from darling_nemo.rehearsal import contract_megatron, contract_megatron_worker
    from darling_nemo.rehearsal.phases import RehearsalFailure

    cfg = load_config(config_path, overrides)
    for name, check, error in (
        ("megatron", contract_megatron.run, contract_megatron.ContractError),
        ("megatron worker", contract_megatron_worker.run, contract_megatron_worker.ContractError),
    ):
        t0 = time.monotonic()
        try:
            outcome = check(cfg)
        except error as err:
            raise RehearsalFailure("contract (megatron)", str(err)) from None
        print(f"phase contract ({name}): {outcome} ({time.monotonic() - t0:.1f} s)", flush=True)
    print("phase contract (vllm): SKIPPED (not implemented yet: see docs/contracts.md)", flush=True)
