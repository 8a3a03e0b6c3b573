"""What the served judge costs per training step, and how many classifier GPUs that needs.

The arithmetic behind docs/judges.md (and anything that simulates a step): a classifier
only runs forward passes over its input (prefill, no decoding), so its time is the step's
judged tokens over the node's token throughput, plus a fixed latency per judge call (one
call per wave of the partition). Throughput is estimated from FLOPs, not measured:

    FLOPs per token = 2 x (non-embedding weights)            one multiply-add per weight
                    + 4 x layers x attention width x context  QK^T and AV (mean context:
                                                              half the input when causal)
    tokens/s per GPU = peak FLOP/s x MFU / FLOPs per token

For the math classifier (Qwen3-Embedding-4B + 2-label head, 3.63 B non-embedding weights,
36 layers, attention width 32 x 128 = 4,096) at 4,096 input tokens: 2 x 3.63e9 +
4 x 36 x 4,096 x 2,048 = 7.27e9 + 1.21e9 = 8.48e9 FLOPs per token. An H100 SXM's dense
bf16 peak is 989 TFLOP/s; long-sequence prefill of a 4 B model reaches about 40% of it
(large matmuls, flash attention; vLLM's own prefill-heavy benchmarks are in that range),
so ~396 TFLOP/s / 8.48e9 = ~46,700 tokens/s per GPU. Treat that as +-30% until measured.
"""

from __future__ import annotations

import math

from darling_nemo.plan import KNOWN_MODELS, Architecture

H100_BF16_DENSE_FLOPS = 989e12  # H100 SXM5 datasheet, dense (no sparsity)
PREFILL_MFU = 0.40  # achieved share of peak for long-sequence prefill of a ~4 B model
MATH_CLASSIFIER = KNOWN_MODELS["dogtooth/qwen3-4b-emb-finetuned-step-70-hf"]
# Measured (docs/judge-cost.md, "Measured"; `python -m darling_nemo.bench.step_time`): per
# paper setting (the benchmark's names) and darling.overlap mode, the judge's share of a step,
# darling_judge / (step - darling_judge) of the paced CPU simulation, one 8-GPU classifier
# node. A smoke run's report prints it beside its measured share.
SIMULATED_JUDGE_SHARE: dict[str, dict[str, float]] = {
    "math": {"sync": 0.727, "overlap": 0.663, "overlap+stream": 0.220},
    "wildchat": {"sync": 0.144, "overlap": 0.0, "overlap+stream": 0.0},
}


def forward_flops_per_token(arch: Architecture, tokens_per_sequence: int) -> float:
    """FLOPs of one forward pass per input token, for sequences of `tokens_per_sequence`."""
    weights = arch.num_layers * arch.layer_params + arch.head_params  # embedding: a lookup
    context = tokens_per_sequence if arch.encoder else tokens_per_sequence / 2  # mean
    attention = 4 * arch.num_layers * arch.q_dim * context
    return 2 * weights + attention


def tokens_per_s_per_gpu(flops_per_token: float, peak_flops: float, mfu: float) -> float:
    """Forward-only token throughput of one GPU."""
    return peak_flops * mfu / flops_per_token


def judge_seconds_per_step(
    pairs: float,
    tokens_per_pair: float,
    tokens_per_s_per_gpu: float,
    gpus: int,
    latency_s: float,
    waves: int,
) -> float:
    """Seconds the judge adds to a step: the step's judged tokens spread over every GPU,
    plus `latency_s` per judge call (HTTP round trip, plus the tail of a call while the last
    requests finish on some GPUs and the others idle; about one request's compute time)."""
    return pairs * tokens_per_pair / (tokens_per_s_per_gpu * gpus) + waves * latency_s


def classifier_gpus_needed(
    pairs: float,
    tokens_per_pair: float,
    tokens_per_s_per_gpu: float,
    latency_s: float,
    waves: int,
    target_s: float,
) -> int:
    """The fewest GPUs that keep `judge_seconds_per_step` within `target_s`."""
    compute_s = target_s - waves * latency_s
    if compute_s <= 0:
        raise ValueError(
            f"{waves} judge calls x {latency_s:g}s latency already exceed {target_s:g}s: "
            "no number of GPUs meets the target (judge_rounds=one makes one call per step)"
        )
    return max(1, math.ceil(pairs * tokens_per_pair / (tokens_per_s_per_gpu * compute_s)))
