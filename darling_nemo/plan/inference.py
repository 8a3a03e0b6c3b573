"""Forward-only workers: vLLM (refit, generation, classifier servers) and the reward model."""

from __future__ import annotations

import math

from darling_nemo.plan.architectures import Architecture
from darling_nemo.plan.layout import Layout
from darling_nemo.plan.megatron import dtype_bytes, first_stage_params
from darling_nemo.plan.terms import (
    GIB,
    VLLM_RUNTIME_BYTES,
    Phase,
    Term,
    gib,
    megatron_runtime_term,
    params_text,
    vllm_cuda_graphs_gib,
    vllm_runtime_term,
)

# vLLM 0.10.0 scheduler defaults on GPUs of 70 GiB or more (engine/arg_utils.py): the memory
# profile runs a batch of this many tokens, and the sampler this many sequences.
VLLM_PROFILE_TOKENS_LLM = 16384  # LLM class (NeMo-RL's generation workers)
VLLM_PROFILE_TOKENS_SERVER = 8192  # `vllm serve` (classifier servers)
VLLM_MAX_NUM_SEQS = 1024


def vllm_weight_bytes(arch: Architecture, tp: int, pp: int) -> float:
    return arch.total_params * 2 / (tp * pp)


def vllm_kv_bytes_per_token(arch: Architecture, tp: int, pp: int) -> int:
    """K and V, bf16, for this GPU's layers and KV heads (vLLM replicates heads when TP > kv)."""
    heads_here = max(1, arch.num_kv_heads // tp)
    return 2 * math.ceil(arch.num_layers / pp) * heads_here * arch.head_dim * 2


def vllm_profile_bytes(arch: Architecture, tp: int, tokens: int, sampler_rows: int) -> float:
    """vLLM's profiling peak: one forward over `tokens` tokens, then the sampler's fp32 logits."""
    h, f = arch.hidden_size, arch.intermediate_size
    per_token = 2 * (2 * h + (2 * arch.q_dim + 2 * arch.kv_dim + 3 * f) // tp)
    return tokens * per_token + sampler_rows * arch.vocab_size * 4 * 2


def refit_phase(arch: Architecture, lay: Layout) -> Phase:
    params = first_stage_params(arch, lay)
    pbytes = dtype_bytes(lay.precision)
    vllm_weights = vllm_weight_bytes(arch, lay.vllm_tp, lay.vllm_pp)
    return Phase(
        "refit",
        "weights streamed from Megatron into the woken vLLM (gradients, optimizer offloaded)",
        [
            Term("Megatron weights", f"{params_text(params)} x {pbytes} B", params * pbytes),
            Term(
                "vLLM weights",
                f"{arch.total_params / 1e9:.3f} B params x 2 B / (vLLM TP {lay.vllm_tp} x PP "
                f"{lay.vllm_pp})",
                vllm_weights,
            ),
            megatron_runtime_term(),
            vllm_runtime_term("vLLM runtime"),
        ],
    )


def generation_phase(arch: Architecture, lay: Layout, capacity: float) -> Phase:
    """vLLM claims utilization x GPU; the rest of the GPU must hold the sleeping trainer."""
    claim = lay.vllm_gpu_memory_utilization * capacity
    weights = vllm_weight_bytes(arch, lay.vllm_tp, lay.vllm_pp)
    profile = vllm_profile_bytes(arch, lay.vllm_tp, VLLM_PROFILE_TOKENS_LLM, VLLM_MAX_NUM_SEQS)
    graphs = vllm_cuda_graphs_gib(lay.vllm_enforce_eager) * GIB
    runtime = VLLM_RUNTIME_BYTES + graphs
    kv_cache = claim - weights - profile - runtime
    per_token = vllm_kv_bytes_per_token(arch, lay.vllm_tp, lay.vllm_pp)
    per_sequence = per_token * lay.vllm_max_model_len
    sequences = kv_cache / per_sequence if kv_cache > 0 else 0.0
    ok = sequences >= 1
    detail = (
        f"KV cache = claim {gib(claim)} - weights {gib(weights)} - profile peak {gib(profile)} "
        f"({VLLM_PROFILE_TOKENS_LLM:,} tokens + sampler for {VLLM_MAX_NUM_SEQS} sequences) - "
        f"runtime {gib(runtime)} = {gib(kv_cache)}; one sequence of max_model_len "
        f"{lay.vllm_max_model_len:,} x {per_token:,} B/token = {gib(per_sequence)} -> "
        f"{sequences:.1f} sequences fit"
        + ("" if ok else " (vLLM refuses to start: KV cache below one sequence)")
    )
    terms = [
        Term(
            "vLLM claim",
            f"gpu_memory_utilization {lay.vllm_gpu_memory_utilization} x {gib(capacity)}",
            claim,
        )
    ]
    if lay.colocated:
        why = "weights, gradients, optimizer offloaded to CPU"
        terms.append(megatron_runtime_term("Megatron asleep", why))
    where = f"vLLM TP {lay.vllm_tp} x PP {lay.vllm_pp}" + ("" if lay.colocated else ", own GPUs")
    return Phase(
        "generation", where, terms, extra_check=(ok, detail), reservation=not lay.colocated
    )


def classifier_phase(
    arch: Architecture, capacity: float, utilization: float, max_model_len: int
) -> Phase:
    """One `vllm serve --task classify` process alone on its GPU."""
    claim = utilization * capacity
    weights = arch.total_params * 2
    profile = vllm_profile_bytes(
        arch, 1, max(VLLM_PROFILE_TOKENS_SERVER, max_model_len), sampler_rows=0
    )
    left = claim - weights - profile - VLLM_RUNTIME_BYTES
    if arch.encoder:
        ok = left >= 0
        detail = f"{gib(left)} of the claim left over (encoder: no KV cache)"
    else:
        per_sequence = vllm_kv_bytes_per_token(arch, 1, 1) * max_model_len
        ok = left >= per_sequence
        detail = (
            f"KV cache {gib(left)} after weights, profile peak and runtime; one "
            f"{max_model_len:,}-token input needs {gib(per_sequence)}"
        )
    terms = [
        Term("vLLM claim", f"--gpu-memory-utilization {utilization} x {gib(capacity)}", claim),
    ]
    return Phase(
        "classifier",
        f"one classifier server per GPU: {arch.name}, weights {gib(weights)}, profile peak "
        f"{gib(profile)}",
        terms,
        extra_check=(ok, detail),
        reservation=True,
    )


def reward_model_phase(arch: Architecture, tokens: int) -> Phase:
    """NeMo-RL's RewardModelEnvironment: one bf16 replica per GPU, forward passes only."""
    weights = arch.total_params * 2
    return Phase(
        "reward model",
        f"{arch.name} on its own GPUs (env.reward_model.resources)",
        [
            Term("weights", f"{arch.total_params / 1e9:.3f} B params x 2 B (bf16)", weights),
            Term(
                "forward peak",
                f"{tokens:,} tokens (batch_size x max_model_len), one layer at a time",
                vllm_profile_bytes(arch, 1, tokens, sampler_rows=0),
            ),
            vllm_runtime_term("runtime"),
        ],
    )
