"""The plan: every phase's per-GPU peak for one GPU size, and the verdict on it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from darling_nemo.plan.architectures import (
    Architecture,
    architecture_from_hf_config,
    resolve_architecture,
)
from darling_nemo.plan.inference import (
    classifier_phase,
    generation_phase,
    refit_phase,
    reward_model_phase,
    vllm_weight_bytes,
)
from darling_nemo.plan.layout import Layout, read_layout
from darling_nemo.plan.megatron import (
    dtype_bytes,
    first_stage_params,
    grad_bytes,
    logprob_phase,
    microbatches_per_rank,
    optimizer_shards,
    optimizer_state_bytes,
    training_phase,
)
from darling_nemo.plan.terms import GIB, Phase, Term, gib, params_text, vllm_asleep_term
from darling_nemo.schema import PAIR_TEMPLATES, ServedJudgeConfig

# nvidia-smi's memory.total: H100 80GB SXM 81559 MiB, H200 143771 MiB.
STANDARD_GPUS: dict[str, float] = {
    "80 GB (H100)": 81559 / 1024,
    "141 GB (H200)": 143771 / 1024,
}
TIGHT_HEADROOM = 0.10  # "fits" with less than 10% of the GPU free is flagged as tight
CLASSIFIER_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default, used by darling-serve-classifiers


@dataclass
class Plan:
    arch: Architecture
    layout: Layout
    capacity_gib: float
    phases: list[Phase]
    notes: list[str] = field(default_factory=list)
    host_terms: list[Term] = field(default_factory=list)

    def verdict(self) -> tuple[bool, bool]:
        """(fits, tight): every phase within the GPU, and whether any has < 10% free."""
        capacity = self.capacity_gib * GIB
        fits, tight = True, False
        for phase in self.phases:
            free = capacity - phase.total
            fits &= free >= 0 and (phase.extra_check is None or phase.extra_check[0])
            tight |= not phase.reservation and 0 <= free < TIGHT_HEADROOM * capacity
        return fits, tight


def host_memory_terms(arch: Architecture, lay: Layout) -> list[Term]:
    """CPU RAM per node for what colocated NeMo-RL offloads between phases."""
    params = first_stage_params(arch, lay)
    pbytes, gbytes = dtype_bytes(lay.precision), grad_bytes(lay)
    state = optimizer_state_bytes(lay) / optimizer_shards(lay)
    per_gpu = params * (pbytes + gbytes + state + pbytes)  # weights, grads, optimizer, reference
    n = lay.gpus_per_node
    terms = [
        Term(
            "Megatron offload",
            f"{n} GPUs x {params_text(params)} x ({pbytes} weights + {gbytes} grads + "
            f"{state:.2f} optimizer + {pbytes} reference copy) B",
            n * per_gpu,
        )
    ]
    if lay.colocated and lay.generation_backend == "vllm":
        vllm = vllm_weight_bytes(arch, lay.vllm_tp, lay.vllm_pp)
        terms.append(Term("vLLM sleep", f"{n} GPUs x {gib(vllm)} weights", n * vllm))
    return terms


def _classifier_server_phase(
    judge: ServedJudgeConfig,
    capacity: float,
    model: str | None,
    utilization: float,
    max_model_len: int | None,
) -> Phase:
    """The served judge's classifier (its template's reference checkpoint unless `model`)."""
    template = PAIR_TEMPLATES[judge.template]
    classifier = resolve_architecture(model or template.reference_model, "--classifier-model")
    # vLLM serves up to the model's own length unless told otherwise; its KV cache must
    # hold one such sequence. Unknown length: the judge's input budget.
    max_len = max_model_len or classifier.max_positions or judge.max_length or template.max_length
    return classifier_phase(classifier, capacity, utilization, max_len)


def _with_node_server(
    phases: list[Phase], judge: ServedJudgeConfig, capacity: float
) -> list[Phase]:
    """darling.judge.launch: the recipe's own classifier server holds its claim on GPU
    launch.gpu for the whole run, beside whichever worker Ray places there (a policy or a
    reward-model worker: the plan assumes the worst, every phase of every GPU). Its claim is
    added to each phase; its own phase checks that the claim holds the classifier."""
    launch = judge.launch
    assert launch is not None
    claim = launch.gpu_memory_utilization * capacity
    server = Term(
        "classifier server",
        f"darling.judge.launch.gpu_memory_utilization {launch.gpu_memory_utilization} x "
        f"{gib(capacity)} (resident all run, GPU {launch.gpu})",
        claim,
    )
    shared = [replace(p, terms=[*p.terms, server]) for p in phases]
    own = _classifier_server_phase(
        judge, capacity, launch.model, launch.gpu_memory_utilization, launch.max_model_len
    )
    own.name = "classifier (node)"
    own.where = f"the recipe's own server on GPU {launch.gpu}: " + own.where.split(": ", 1)[1]
    return [*shared, own]


def make_plan(
    cfg: dict[str, Any],
    capacity_gib: float,
    model_config: str | None = None,
    classifier_model: str | None = None,
    classifier_gpu_memory_utilization: float = CLASSIFIER_GPU_MEMORY_UTILIZATION,
    classifier_max_model_len: int | None = None,
) -> Plan:
    """Every phase's per-GPU peak for one GPU size."""
    lay = read_layout(cfg)
    arch = (
        architecture_from_hf_config(Path(model_config), name=lay.model)
        if model_config
        else resolve_architecture(lay.model, "policy.model_name")
    )
    capacity = capacity_gib * GIB
    colocated_vllm = lay.colocated and lay.generation_backend == "vllm"
    asleep = vllm_asleep_term(lay.vllm_enforce_eager) if colocated_vllm else None
    phases = [training_phase(arch, lay, "first", asleep)]
    if lay.pp > 1:
        phases.append(training_phase(arch, lay, "last", asleep))
    phases.append(logprob_phase(arch, lay, asleep))
    notes = []
    if lay.generation_backend == "vllm":
        if colocated_vllm:
            phases.append(refit_phase(arch, lay))
        phases.append(generation_phase(arch, lay, capacity))
    else:
        notes.append(f"generation backend {lay.generation_backend!r}: no vLLM phases")
    if lay.reward_model:
        reward = resolve_architecture(lay.reward_model, "env.reward_model.model_name")
        phases.append(reward_model_phase(reward, lay.reward_model_tokens))
    judge = lay.darling.judge
    if isinstance(judge, ServedJudgeConfig) and judge.launch is not None:
        phases = _with_node_server(phases, judge, capacity)
    elif isinstance(judge, ServedJudgeConfig):
        phases.append(
            _classifier_server_phase(
                judge,
                capacity,
                classifier_model,
                classifier_gpu_memory_utilization,
                classifier_max_model_len,
            )
        )
    microbatches = microbatches_per_rank(lay)
    if lay.pp > 1 and microbatches < lay.pp:
        notes.append(
            f"only {microbatches} micro-batches per step per DP rank (< PP {lay.pp}): "
            "the pipeline never fills"
        )
    return Plan(arch, lay, capacity_gib, phases, notes, host_memory_terms(arch, lay))
