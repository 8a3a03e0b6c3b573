"""The Megatron policy's phases: a training step and the log-probabilities, per GPU."""

from __future__ import annotations

import math

from darling_nemo.plan.architectures import Architecture
from darling_nemo.plan.layout import Layout
from darling_nemo.plan.terms import Phase, Term, gib, megatron_runtime_term, params_text

# Log-probabilities from the logits (NeMo-RL v0.4.0 distributed/model_utils.py), in bytes per
# (token x vocabulary entry of this TP rank). Megatron hands over fp32 logits (Float16Module
# casts the output) unless policy.megatron_cfg.defer_fp32_logits; the distributed log-softmax
# then holds at most three fp32 tensors of that size at once (logits, shifted logits, exp /
# log-softmax / softmax).
LOGIT_BYTES_FP32 = 12
# defer_fp32_logits: bf16 logits kept (2) ...
LOGIT_BYTES_BF16 = 2
# ... and, per chunk of policy.logprob_chunk_size tokens (or all of them), an fp32 copy plus
# two fp32 temporaries.
LOGIT_CHUNK_BYTES = 12


def dtype_bytes(precision: str) -> int:
    return 4 if precision == "float32" else 2


def grad_bytes(lay: Layout) -> int:
    return 4 if lay.grad_reduce_in_fp32 else dtype_bytes(lay.precision)


def optimizer_state_bytes(lay: Layout) -> int:
    """Per parameter, unsharded: fp32 master copy (absent for fp32 params) + Adam's m and v."""
    master = 4 if dtype_bytes(lay.precision) == 2 else 0
    return master + (8 if lay.optimizer == "adam" else 4)


def optimizer_shards(lay: Layout) -> int:
    """DP x CP shards of the distributed optimizer (1: every rank holds all of it)."""
    return lay.dp * lay.cp if lay.distributed_optimizer else 1


def microbatches_per_rank(lay: Layout) -> int:
    """Training micro-batches one DP rank runs per step."""
    return lay.train_global_batch_size // max(1, lay.dp * lay.train_micro_batch_size)


def stage_layers(lay: Layout, arch: Architecture) -> tuple[int, int]:
    """Transformer layers on the first and on the last pipeline stage."""
    if lay.pp == 1:
        return arch.num_layers, arch.num_layers
    first, last = lay.first_stage_layers, lay.last_stage_layers
    rest_stages = lay.pp - (first is not None) - (last is not None)
    rest_layers = arch.num_layers - (first or 0) - (last or 0)
    even = math.ceil(rest_layers / rest_stages) if rest_stages else 0
    return (first if first is not None else even), (last if last is not None else even)


def first_stage_params(arch: Architecture, lay: Layout) -> float:
    """Parameters of one GPU of the first pipeline stage: its layers and the embedding."""
    first_layers, _ = stage_layers(lay, arch)
    return (first_layers * arch.layer_params + arch.embedding_params) / lay.tp


def activation_bytes_per_token(arch: Architecture, tp: int, sp: bool) -> tuple[int, str]:
    """Bytes one transformer layer keeps for backward, per token (bf16, TE + flash attention).

    Per layer Megatron/TE saves: for each of the two norms its input and its output (the GEMM
    input): 4 x h; attention q, k, v and output for flash attention: 2 q_dim + 2 kv_dim; the
    MLP's fc1 output (gate and up) and the activation output (fc2 input): 3 x ffn. The norm
    parts are split over TP only with sequence parallelism; the rest always is.
    """
    h, f = arch.hidden_size, arch.intermediate_size
    norm_elems = 4 * h
    sharded_elems = 2 * arch.q_dim + 2 * arch.kv_dim + 3 * f
    if sp or tp == 1:
        total = 2 * (norm_elems + sharded_elems) // tp
        how = f"2 B x (4h + 2q + 2kv + 3ffn) / TP {tp}"
    else:
        total = 2 * norm_elems + 2 * sharded_elems // tp
        how = f"2 B x 4h (replicated, no sequence parallel) + 2 B x (2q + 2kv + 3ffn) / TP {tp}"
    return total, how


def logits_term(arch: Architecture, lay: Layout, tokens: int, what: str) -> Term:
    """Logits of one micro-batch turned into log-probabilities (last pipeline stage)."""
    shard = math.ceil(arch.vocab_size / lay.tp)
    head = f"{tokens:,} tokens ({what}) x {shard:,} vocab entries (vocab / TP {lay.tp})"
    if not lay.defer_fp32_logits:
        return Term(
            "logits",
            f"{head} x {LOGIT_BYTES_FP32} B (fp32 logits + 2 fp32 log-softmax temporaries)",
            tokens * shard * LOGIT_BYTES_FP32,
        )
    chunk = min(tokens, lay.logprob_chunk_size or tokens)
    return Term(
        "logits",
        f"{head} x {LOGIT_BYTES_BF16} B (bf16, defer_fp32_logits) + {chunk:,} tokens "
        f"(logprob_chunk_size) x {shard:,} x {LOGIT_CHUNK_BYTES} B (fp32 temporaries)",
        tokens * shard * LOGIT_BYTES_BF16 + chunk * shard * LOGIT_CHUNK_BYTES,
    )


def _training_state_terms(lay: Layout, params: float) -> list[Term]:
    """Weights, gradients and the optimizer's share of one training GPU."""
    pbytes, gbytes = dtype_bytes(lay.precision), grad_bytes(lay)
    terms = [
        Term(
            "parameters", f"{params_text(params)} x {pbytes} B ({lay.precision})", params * pbytes
        ),
        Term(
            "gradients",
            f"{params_text(params)} x {gbytes} B (grad_reduce_in_fp32={lay.grad_reduce_in_fp32})",
            params * gbytes,
        ),
    ]
    if lay.optimizer_cpu_offload:
        terms.append(Term("optimizer", "offloaded to CPU (optimizer_cpu_offload)", 0))
        return terms
    state_bytes, shards = optimizer_state_bytes(lay), optimizer_shards(lay)
    terms.append(
        Term(
            "optimizer",
            f"{params_text(params)} x {state_bytes} B ({lay.optimizer} states, fp32) / {shards} "
            "(DP x CP shards of the distributed optimizer)",
            params * state_bytes / shards,
        )
    )
    return terms


def _activation_term(
    arch: Architecture, lay: Layout, layers: int, tokens: int, in_flight: int
) -> Term:
    """What the backward pass needs kept, for the micro-batches in flight on this stage."""
    per_token, how = activation_bytes_per_token(arch, lay.tp, lay.sequence_parallel)
    if not lay.activation_checkpointing:
        return Term(
            "activations",
            f"{in_flight} micro-batch(es) in flight x {layers} layers x {tokens:,} tokens "
            f"x {per_token:,} B/token/layer [{how}]",
            in_flight * layers * tokens * per_token,
        )
    norm_shard = lay.tp if (lay.sequence_parallel or lay.tp == 1) else 1
    kept = 2 * arch.hidden_size // norm_shard
    return Term(
        "activations",
        f"{in_flight} micro-batch(es) x {layers} layers x {tokens:,} tokens x {kept:,} B "
        f"(layer inputs kept by full recompute) + one layer recomputed: {tokens:,} x "
        f"{per_token:,} B [{how}]",
        in_flight * layers * tokens * kept + tokens * per_token,
    )


def training_phase(arch: Architecture, lay: Layout, stage: str, vllm_asleep: Term | None) -> Phase:
    """Megatron train step on the first or last pipeline stage (the two extremes)."""
    first_layers, last_layers = stage_layers(lay, arch)
    last = stage == "last" or lay.pp == 1
    first = stage == "first" or lay.pp == 1
    layers = first_layers if stage == "first" else last_layers
    params = layers * arch.layer_params
    parts = [f"{layers} layers"]
    if first:
        params += arch.embedding_params
        parts.append("embedding")
    if last:
        # A tied LM head still needs the embedding matrix on the last stage when PP > 1.
        params += arch.head_params + (
            arch.embedding_params if arch.tied_embeddings and lay.pp > 1 else 0
        )
        parts.append("output layer")
    terms = _training_state_terms(lay, params / lay.tp)
    tokens = lay.train_mb_tokens // lay.cp
    # 1F1B: stage s holds the activations of (pp - s) micro-batches at the peak.
    in_flight = min(lay.pp if stage == "first" else 1, max(1, microbatches_per_rank(lay)))
    terms.append(_activation_term(arch, lay, layers, tokens, in_flight))
    if last:
        terms.append(logits_term(arch, lay, tokens, "training micro-batch"))
    terms.append(megatron_runtime_term())
    if vllm_asleep:
        terms.append(vllm_asleep)
    where = f"{'first' if stage == 'first' else 'last'} pipeline stage: {', '.join(parts)}"
    if lay.pp == 1:
        where = f"PP 1: {', '.join(parts)}"
    return Phase("training", where, terms)


def logprob_phase(arch: Architecture, lay: Layout, vllm_asleep: Term | None) -> Phase:
    """Policy / reference log-probabilities on the last stage (grads, optimizer offloaded)."""
    _, last_layers = stage_layers(lay, arch)
    params = last_layers * arch.layer_params + arch.head_params
    if lay.pp == 1 or arch.tied_embeddings:
        params += arch.embedding_params
    params /= lay.tp
    pbytes = dtype_bytes(lay.precision)
    tokens = lay.logprob_mb_tokens // lay.cp
    per_token, how = activation_bytes_per_token(arch, lay.tp, lay.sequence_parallel)
    logits = logits_term(arch, lay, tokens, "logprob micro-batch")
    layer = tokens * per_token
    # Forward only: a layer's intermediates are freed before the next layer runs, and all of
    # them before the logits exist, so the peak is the larger of the two.
    terms = [
        Term("parameters", f"{params_text(params)} x {pbytes} B", params * pbytes),
        Term(
            "forward peak",
            f"max(one layer {gib(layer)} = {tokens:,} tokens x {per_token:,} B [{how}]; "
            f"logits {gib(logits.bytes)} = {logits.arithmetic})",
            max(layer, logits.bytes),
        ),
        megatron_runtime_term(),
    ]
    if vllm_asleep:
        terms.append(vllm_asleep)
    return Phase("logprobs", "last pipeline stage, gradients and optimizer offloaded", terms)
