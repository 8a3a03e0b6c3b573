"""CPU stand-ins for NeMo-RL v0.4.0's GPU worker classes, used only by the rehearsal.

NeMo-RL names its GPU workers by class path (`RayWorkerBuilder("nemo_rl.models...Worker")`)
and imports them inside Ray actors. The rehearsal swaps those class paths for the classes
below (darling_nemo/rehearsal/swap.py), so NeMo-RL's own driver, `Policy`, `VllmGeneration`,
`RayWorkerGroup`, loss function, checkpointing and environments run unchanged and only the
lowest layer differs. The stand-ins really compute, on a tiny Hugging Face model in fp32:
- policy: log-probabilities, NeMo-RL's own loss function (handed in by `Policy.train`),
  gradients summed over the data-parallel ranks (gloo), an optimizer step, checkpoints
  written and read back (a weights fingerprint is checked on load);
- generation (vLLM, sync and async engine): sampling with the current weights, which
  arrive through a refit over ZeroMQ, as NeMo-RL's colocated refit does, one socket per
  fake GPU (policy rank and vLLM worker on the same GPU meet at the same address);
- reward model: a tiny sequence classifier's score.
Every public method answers the call NeMo-RL's driver makes on the real worker (names and
signatures from v0.4.0's sources); nothing NeMo-RL computes above these classes is redone.
The module imports nothing heavy at import time: Ray imports it in every worker initializer.
"""

from __future__ import annotations

import ray

from darling_nemo.rehearsal.generation_standins import (
    PrefixReportingVllmAsyncWorkerStandIn,
    VllmAsyncGenerationWorkerStandIn,
    VllmGenerationWorkerStandIn,
)
from darling_nemo.rehearsal.policy_standins import (
    DTensorPolicyWorkerStandIn,
    DTensorPolicyWorkerV2StandIn,
    MegatronPolicyWorkerStandIn,
)

# Ray actor classes, as NeMo-RL's own workers are (`@ray.remote class ...Worker`);
# RayWorkerBuilder calls `.options(...).remote(...)` and `configure_worker` on them.
MegatronPolicyWorker = ray.remote(MegatronPolicyWorkerStandIn)
DTensorPolicyWorker = ray.remote(DTensorPolicyWorkerStandIn)
DTensorPolicyWorkerV2 = ray.remote(DTensorPolicyWorkerV2StandIn)
VllmGenerationWorker = ray.remote(VllmGenerationWorkerStandIn)
VllmAsyncGenerationWorker = ray.remote(VllmAsyncGenerationWorkerStandIn)
PrefixReportingVllmAsyncWorker = ray.remote(PrefixReportingVllmAsyncWorkerStandIn)

STAND_INS: dict[str, str] = {
    stand_in.stands_in_for: f"{__name__}.{stand_in.stands_in_for.rsplit('.', 1)[1]}"
    for stand_in in (
        MegatronPolicyWorkerStandIn,
        DTensorPolicyWorkerStandIn,
        DTensorPolicyWorkerV2StandIn,
        VllmGenerationWorkerStandIn,
        VllmAsyncGenerationWorkerStandIn,
        PrefixReportingVllmAsyncWorkerStandIn,
    )
}
