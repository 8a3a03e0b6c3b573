"""`darling-plan`: pre-flight GPU memory plan for a NeMo-RL v0.4.0 Megatron GRPO config.

    darling-plan conf/wildchat_llama70b_darling.yaml
    darling-plan conf/wildchat_llama70b_darling.yaml policy.megatron_cfg.pipeline_model_parallel_size=2
    darling-plan CONFIG --gpu-memory auto --check      # what slurm/*.sub run before launching

Out-of-memory at start-up is the commonest failure of large GRPO runs. This estimates, before
anything starts, the peak memory of one GPU in each phase of a colocated NeMo-RL step and
says whether it fits on 80 GB (H100) and 141 GB (H200) GPUs, showing the arithmetic:

  training    Megatron weights + gradients + optimizer shard + activations (1F1B pipeline)
              + logits, next to the sleeping vLLM worker
  logprobs    policy/reference log-probabilities (gradients and optimizer are offloaded)
  refit       Megatron weights and the woken vLLM weights, both on the GPU
  generation  vLLM claims gpu_memory_utilization x GPU; its KV cache must hold at least one
              max_model_len sequence (vLLM refuses to start otherwise)
  reward model  NeMo-RL's reward-model environment on its own GPUs (WildChat configs)
  classifier  one `vllm serve --task classify` per GPU on the classifier GPUs

It reads the same config the recipe reads (`load_config`, same overrides). Model shapes come
from a small table (no hub access) or from a local `config.json`. README "How far the memory
plan can be trusted" says what is modelled and what is a fixed allowance.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from darling_nemo.config import load_config
from darling_nemo.schema import (
    PAIR_TEMPLATES,
    ConfigError,
    DarlingConfig,
    ServedJudgeConfig,
    validate_darling,
)

GIB = 1024**3

# nvidia-smi's memory.total: H100 80GB SXM 81559 MiB, H200 143771 MiB.
STANDARD_GPUS: dict[str, float] = {
    "80 GB (H100)": 81559 / 1024,
    "141 GB (H200)": 143771 / 1024,
}
TIGHT_HEADROOM = 0.10  # "fits" with less than 10% of the GPU free is flagged as tight

# Fixed allowances (GiB) for what the arithmetic does not derive. Deliberately round numbers;
# README explains them. Per process: CUDA context (torch + NCCL + cuBLAS handles).
CUDA_CONTEXT_GIB = 0.6
# Megatron worker: NCCL communicators of the TP/PP/DP groups, TE/cuBLAS workspaces, small
# buffers that offloading leaves on the GPU.
MEGATRON_RUNTIME_GIB = 1.5
# vLLM worker: NCCL + custom all-reduce buffers, sampler scratch.
VLLM_RUNTIME_GIB = 1.0
# CUDA graphs captured by vLLM (enforce_eager=false); sleep mode does not release them.
VLLM_CUDA_GRAPHS_GIB = 1.0

# vLLM 0.10.0 scheduler defaults on GPUs of 70 GiB or more (engine/arg_utils.py): the memory
# profile runs a batch of this many tokens, and the sampler this many sequences.
VLLM_PROFILE_TOKENS_LLM = 16384  # LLM class (NeMo-RL's generation workers)
VLLM_PROFILE_TOKENS_SERVER = 8192  # `vllm serve` (classifier servers)
VLLM_MAX_NUM_SEQS = 1024

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

# The reference classifier checkpoints, by the served judge's pair template.
CLASSIFIER_FOR_TEMPLATE = {
    "modernbert": "dogtooth/similarity-classifier-f168-hf",
    "qwen3_math": "dogtooth/qwen3-4b-emb-finetuned-step-70-hf",
}
CLASSIFIER_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default, used by darling-serve-classifiers


# ---------------------------------------------------------------------------------------------
# Model shapes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """The shape numbers the estimate needs. Gated MLP (SwiGLU/GeGLU), no biases."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    num_labels: int = 0  # > 0: a sequence-classification head instead of the LM head
    qk_norm: bool = False  # Qwen3: RMSNorm on q and k (head_dim weights each)
    encoder: bool = False  # bidirectional encoder: no KV cache when served
    max_positions: int = 0  # max_position_embeddings: vLLM's default max_model_len (0: unknown)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h = self.hidden_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attention + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        """Output head + final norm (the LM head is the embedding when tied)."""
        if self.num_labels:
            return self.num_labels * self.hidden_size + self.hidden_size
        lm_head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return lm_head + self.hidden_size

    @property
    def total_params(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params + self.head_params

    def describe(self) -> str:
        return (
            f"{self.name}: {self.num_layers} layers, hidden {self.hidden_size}, "
            f"MLP {self.intermediate_size}, {self.num_heads} heads / {self.num_kv_heads} KV heads "
            f"x {self.head_dim}, vocab {self.vocab_size:,} -> {self.total_params / 1e9:.2f} B params"
        )


# Numbers from each checkpoint's config.json. Parameter counts reproduce the published ones
# (tests/test_plan.py: 4,022,468,096 for Qwen3-4B, 8,030,261,248 for Llama-3.1-8B, ...).
# fmt: off
KNOWN_MODELS: dict[str, Architecture] = {a.name: a for a in [
    #            name                                  hidden layers heads kv head_dim  MLP   vocab   tied
    Architecture("Qwen/Qwen3-4B-Base",                 2560,  36,  32,  8, 128,  9728, 151936, True, qk_norm=True),
    Architecture("Qwen/Qwen3-4B",                      2560,  36,  32,  8, 128,  9728, 151936, True, qk_norm=True),
    Architecture("Qwen/Qwen3-14B-Base",                5120,  40,  40,  8, 128, 17408, 151936, False, qk_norm=True),
    Architecture("Qwen/Qwen3-14B",                     5120,  40,  40,  8, 128, 17408, 151936, False, qk_norm=True),
    Architecture("meta-llama/Llama-3.1-8B-Instruct",   4096,  32,  32,  8, 128, 14336, 128256, False),
    Architecture("meta-llama/Llama-3.1-8B",            4096,  32,  32,  8, 128, 14336, 128256, False),
    Architecture("meta-llama/Llama-3.3-70B-Instruct",  8192,  80,  64,  8, 128, 28672, 128256, False),
    Architecture("meta-llama/Llama-3.1-70B-Instruct",  8192,  80,  64,  8, 128, 28672, 128256, False),
    Architecture("Skywork/Skywork-Reward-V2-Llama-3.1-8B", 4096, 32, 32,  8, 128, 14336, 128256, False, num_labels=1),
    # Classifiers with 2-label heads: ModernBERT-base (WildChat), Qwen3-Embedding-4B (math).
    Architecture("dogtooth/similarity-classifier-f168-hf",      768, 22, 12, 12, 64, 1152, 50368, True, num_labels=2, encoder=True, max_positions=8192),
    Architecture("dogtooth/qwen3-4b-emb-finetuned-step-70-hf", 2560, 36, 32,  8, 128, 9728, 151665, True, num_labels=2, qk_norm=True, max_positions=40960),
]}
# fmt: on


def architecture_from_hf_config(path: Path, name: str | None = None) -> Architecture:
    """Read a Hugging Face `config.json` (file, or a model directory holding one)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such file (expected a Hugging Face config.json)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{file}:{err.lineno}: invalid JSON: {err.msg}") from None
    missing = [
        k
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
        if k not in raw
    ]
    if "intermediate_size" not in raw:
        missing.append("intermediate_size")
    if missing:
        raise ConfigError(f"{file}: missing {', '.join(missing)}")
    heads = raw["num_attention_heads"]
    architectures = raw.get("architectures") or [""]
    is_classifier = architectures[0].endswith("ForSequenceClassification")
    model_type = raw.get("model_type", "")
    return Architecture(
        name=name or str(path),
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
        intermediate_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        # transformers' own default is True; Llama configs say false explicitly.
        tied_embeddings=bool(raw.get("tie_word_embeddings", True)),
        num_labels=len(raw.get("id2label", {0: 0, 1: 1})) if is_classifier else 0,
        qk_norm=model_type == "qwen3",
        encoder=model_type in ("modernbert", "bert", "roberta", "deberta-v2"),
        max_positions=int(raw.get("max_position_embeddings") or 0),
    )


def resolve_architecture(model: str, key: str) -> Architecture:
    """A model name from the table, or a local directory / config.json path."""
    path = Path(model)
    if path.exists():
        return architecture_from_hf_config(path, name=model)
    if model in KNOWN_MODELS:
        return KNOWN_MODELS[model]
    by_basename = {name.split("/")[-1]: arch for name, arch in KNOWN_MODELS.items()}
    if path.name in by_basename:  # e.g. /models/Llama-3.3-70B-Instruct not mounted here
        return replace(by_basename[path.name], name=model)
    known = ", ".join(sorted(KNOWN_MODELS))
    raise ConfigError(
        f"{key}: unknown model {model!r}: not a local path with a config.json and not one of "
        f"{known}; pass --model-config PATH/config.json"
    )


# ---------------------------------------------------------------------------------------------
# The layout read from a NeMo-RL config
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Everything the estimate reads from the config, with the key it came from."""

    model: str
    precision: str
    num_nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    cp: int
    sequence_parallel: bool
    activation_checkpointing: bool
    first_stage_layers: int | None
    last_stage_layers: int | None
    optimizer: str
    distributed_optimizer: bool
    optimizer_cpu_offload: bool
    grad_reduce_in_fp32: bool
    train_mb_tokens: int
    logprob_mb_tokens: int
    train_global_batch_size: int
    train_micro_batch_size: int
    colocated: bool
    generation_backend: str
    defer_fp32_logits: bool
    logprob_chunk_size: int | None
    vllm_tp: int
    vllm_pp: int
    vllm_gpu_memory_utilization: float
    vllm_max_model_len: int
    vllm_enforce_eager: bool
    policy_nodes: int  # what NeMo-RL's grpo.setup() gives the policy, after the reward
    policy_gpus_per_node: int  # model's and (non-colocated) the generation GPUs
    reward_model: str | None  # env.reward_model.model_name when enabled
    reward_model_tokens: int  # env.reward_model.batch_size x max_model_len
    darling: DarlingConfig  # validated darling: section (schema defaults when absent)

    @property
    def world_size(self) -> int:
        """GPUs of the Megatron policy."""
        return self.policy_nodes * self.policy_gpus_per_node

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{dotted}: missing from the config (darling-plan needs it)")
        node = node[part]
    return node


def _get_or(cfg: dict[str, Any], dotted: str, absent: Any) -> Any:
    """For keys NeMo-RL v0.4.0 itself treats as optional (NotRequired in its TypedDicts)."""
    try:
        value = _get(cfg, dotted)
    except ConfigError:
        return absent
    return absent if value is None else value


def read_layout(cfg: dict[str, Any]) -> Layout:
    """Pull the memory-relevant keys out of a resolved NeMo-RL MasterConfig."""
    if not _get(cfg, "policy.megatron_cfg.enabled"):
        raise ConfigError(
            "policy.megatron_cfg.enabled: false; darling-plan models the Megatron backend only"
        )
    mcfg = "policy.megatron_cfg"
    seq = int(_get(cfg, "policy.max_total_sequence_length"))
    micro = int(_get(cfg, "policy.train_micro_batch_size"))
    logprob_batch = int(_get(cfg, "policy.logprob_batch_size"))
    packing = _get_or(cfg, "policy.sequence_packing.enabled", False)
    dynamic = _get_or(cfg, "policy.dynamic_batching.enabled", False)
    if packing or dynamic:
        section = "policy.sequence_packing" if packing else "policy.dynamic_batching"
        train_tokens = int(_get(cfg, f"{section}.train_mb_tokens"))
        logprob_tokens = int(_get(cfg, f"{section}.logprob_mb_tokens"))
    else:
        train_tokens, logprob_tokens = micro * seq, logprob_batch * seq
    generation = "policy.generation"
    num_nodes = int(_get(cfg, "cluster.num_nodes"))
    gpus_per_node = int(_get(cfg, "cluster.gpus_per_node"))
    colocated = bool(_get_or(cfg, f"{generation}.colocated.enabled", True))
    rm_enabled = bool(_get_or(cfg, "env.reward_model.enabled", False))
    rm_nodes = int(_get(cfg, "env.reward_model.resources.num_nodes")) if rm_enabled else 0
    rm_gpus = int(_get(cfg, "env.reward_model.resources.gpus_per_node")) if rm_enabled else 0
    # NeMo-RL v0.4.0 grpo.setup(): on one node the reward model takes GPUs, else nodes.
    policy_nodes = 1 if num_nodes == 1 else num_nodes - rm_nodes
    policy_gpus = gpus_per_node - rm_gpus if num_nodes == 1 else gpus_per_node
    if not colocated:  # the generation GPUs come out of the policy's share
        gen_nodes = int(_get_or(cfg, f"{generation}.colocated.resources.num_nodes", 1))
        gen_gpus = int(_get(cfg, f"{generation}.colocated.resources.gpus_per_node"))
        if policy_nodes == 1:
            policy_gpus -= gen_gpus
        else:
            policy_nodes -= gen_nodes
    layout = Layout(
        model=str(_get(cfg, "policy.model_name")),
        precision=str(_get(cfg, "policy.precision")),
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        tp=int(_get(cfg, f"{mcfg}.tensor_model_parallel_size")),
        pp=int(_get(cfg, f"{mcfg}.pipeline_model_parallel_size")),
        cp=int(_get(cfg, f"{mcfg}.context_parallel_size")),
        sequence_parallel=bool(_get(cfg, f"{mcfg}.sequence_parallel")),
        activation_checkpointing=bool(_get(cfg, f"{mcfg}.activation_checkpointing")),
        first_stage_layers=_get_or(cfg, f"{mcfg}.num_layers_in_first_pipeline_stage", None),
        last_stage_layers=_get_or(cfg, f"{mcfg}.num_layers_in_last_pipeline_stage", None),
        optimizer=str(_get(cfg, f"{mcfg}.optimizer.optimizer")),
        distributed_optimizer=bool(_get(cfg, f"{mcfg}.optimizer.use_distributed_optimizer")),
        optimizer_cpu_offload=bool(_get_or(cfg, f"{mcfg}.optimizer.optimizer_cpu_offload", False)),
        grad_reduce_in_fp32=bool(
            _get(cfg, f"{mcfg}.distributed_data_parallel_config.grad_reduce_in_fp32")
        ),
        train_mb_tokens=train_tokens,
        logprob_mb_tokens=logprob_tokens,
        train_global_batch_size=int(_get(cfg, "policy.train_global_batch_size")),
        train_micro_batch_size=micro,
        colocated=colocated,
        generation_backend=str(_get(cfg, f"{generation}.backend")),
        defer_fp32_logits=bool(_get_or(cfg, f"{mcfg}.defer_fp32_logits", False)),
        logprob_chunk_size=_get_or(cfg, "policy.logprob_chunk_size", None),
        vllm_tp=int(_get(cfg, f"{generation}.vllm_cfg.tensor_parallel_size")),
        vllm_pp=int(_get_or(cfg, f"{generation}.vllm_cfg.pipeline_parallel_size", 1)),
        vllm_gpu_memory_utilization=float(
            _get(cfg, f"{generation}.vllm_cfg.gpu_memory_utilization")
        ),
        vllm_max_model_len=int(_get(cfg, f"{generation}.vllm_cfg.max_model_len")),
        vllm_enforce_eager=bool(_get_or(cfg, f"{generation}.vllm_cfg.enforce_eager", False)),
        policy_nodes=policy_nodes,
        policy_gpus_per_node=policy_gpus,
        reward_model=str(_get(cfg, "env.reward_model.model_name")) if rm_enabled else None,
        reward_model_tokens=(
            int(_get(cfg, "env.reward_model.batch_size"))
            * int(_get(cfg, "env.reward_model.max_model_len"))
            if rm_enabled
            else 0
        ),
        darling=validate_darling(_get_or(cfg, "darling", None)),
    )
    _check_layout(layout)
    return layout


def _check_layout(lay: Layout) -> None:
    problems = []
    model_parallel = lay.tp * lay.pp * lay.cp
    if lay.world_size <= 0:
        problems.append(
            f"cluster: no GPUs left for the policy ({lay.num_nodes} nodes x "
            f"{lay.gpus_per_node} GPUs minus reward model / generation resources)"
        )
    elif lay.world_size % model_parallel:
        problems.append(
            f"cluster: the policy's {lay.policy_nodes} nodes x {lay.policy_gpus_per_node} GPUs = "
            f"{lay.world_size} is not a multiple of TP {lay.tp} x PP {lay.pp} x CP {lay.cp} "
            f"= {model_parallel}"
        )
    vllm_gpus = lay.vllm_tp * lay.vllm_pp
    if lay.generation_backend == "vllm" and lay.world_size % vllm_gpus:
        problems.append(
            f"policy.generation.vllm_cfg: TP {lay.vllm_tp} x PP {lay.vllm_pp} does not divide "
            f"the {lay.world_size} GPUs"
        )
    if not 0 < lay.vllm_gpu_memory_utilization <= 1:
        problems.append("policy.generation.vllm_cfg.gpu_memory_utilization must be in (0, 1]")
    if lay.precision not in ("bfloat16", "float16", "float32"):
        problems.append(f"policy.precision: unknown precision {lay.precision!r}")
    if problems:
        raise ConfigError("invalid layout:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------------------------
# The estimate
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """One addend of a phase, with the arithmetic that produced it."""

    label: str
    arithmetic: str
    bytes: float


@dataclass
class Phase:
    name: str
    where: str  # which GPU / stage this is the peak of
    terms: list[Term]
    # Generation only: vLLM's own requirement (KV cache >= one sequence), checked apart from
    # the sum of terms.
    extra_check: tuple[bool, str] | None = None
    # A vLLM reservation alone on its GPUs (gpu_memory_utilization x GPU by design): judged by
    # extra_check, never "tight", and not the run's peak.
    reservation: bool = False

    @property
    def total(self) -> float:
        return sum(t.bytes for t in self.terms)


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


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _b(params: float) -> str:
    return f"{params / 1e9:.3f} B params"


def _dtype_bytes(precision: str) -> int:
    return 4 if precision == "float32" else 2


def stage_layers(lay: Layout, arch: Architecture) -> tuple[int, int]:
    """Transformer layers on the first and on the last pipeline stage."""
    if lay.pp == 1:
        return arch.num_layers, arch.num_layers
    first, last = lay.first_stage_layers, lay.last_stage_layers
    rest_stages = lay.pp - (first is not None) - (last is not None)
    rest_layers = arch.num_layers - (first or 0) - (last or 0)
    even = math.ceil(rest_layers / rest_stages) if rest_stages else 0
    return (first if first is not None else even), (last if last is not None else even)


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


def training_phase(arch: Architecture, lay: Layout, stage: str, vllm_asleep: float) -> Phase:
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
    params /= lay.tp
    pbytes = _dtype_bytes(lay.precision)
    gbytes = 4 if lay.grad_reduce_in_fp32 else pbytes
    terms = [
        Term("parameters", f"{_b(params)} x {pbytes} B ({lay.precision})", params * pbytes),
        Term(
            "gradients",
            f"{_b(params)} x {gbytes} B (grad_reduce_in_fp32={lay.grad_reduce_in_fp32})",
            params * gbytes,
        ),
    ]
    # Adam: fp32 master copy (absent when the params already are fp32) + m + v.
    state_bytes = (4 if pbytes == 2 else 0) + (8 if lay.optimizer == "adam" else 4)
    shards = lay.dp * lay.cp if lay.distributed_optimizer else 1
    if lay.optimizer_cpu_offload:
        terms.append(Term("optimizer", "offloaded to CPU (optimizer_cpu_offload)", 0))
    else:
        terms.append(
            Term(
                "optimizer",
                f"{_b(params)} x {state_bytes} B ({lay.optimizer} states, fp32) / {shards} "
                "(DP x CP shards of the distributed optimizer)",
                params * state_bytes / shards,
            )
        )
    tokens = lay.train_mb_tokens // lay.cp
    per_token, how = activation_bytes_per_token(arch, lay.tp, lay.sequence_parallel)
    # 1F1B: stage s holds the activations of (pp - s) micro-batches at the peak.
    microbatches_per_rank = max(
        1, lay.train_global_batch_size // max(1, lay.dp * lay.train_micro_batch_size)
    )
    in_flight = min(lay.pp if stage == "first" else 1, microbatches_per_rank)
    if lay.activation_checkpointing:
        norm_shard = lay.tp if (lay.sequence_parallel or lay.tp == 1) else 1
        kept = 2 * arch.hidden_size // norm_shard
        terms.append(
            Term(
                "activations",
                f"{in_flight} micro-batch(es) x {layers} layers x {tokens:,} tokens x {kept:,} B "
                f"(layer inputs kept by full recompute) + one layer recomputed: {tokens:,} x "
                f"{per_token:,} B [{how}]",
                in_flight * layers * tokens * kept + tokens * per_token,
            )
        )
    else:
        terms.append(
            Term(
                "activations",
                f"{in_flight} micro-batch(es) in flight x {layers} layers x {tokens:,} tokens "
                f"x {per_token:,} B/token/layer [{how}]",
                in_flight * layers * tokens * per_token,
            )
        )
    if last:
        terms.append(logits_term(arch, lay, tokens, "training micro-batch"))
    terms += _megatron_runtime_terms()
    if vllm_asleep:
        terms.append(Term("vLLM asleep", _vllm_asleep_text(lay), vllm_asleep))
    where = f"{'first' if stage == 'first' else 'last'} pipeline stage: {', '.join(parts)}"
    if lay.pp == 1:
        where = f"PP 1: {', '.join(parts)}"
    return Phase("training", where, terms)


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


def _megatron_runtime_terms() -> list[Term]:
    return [
        Term(
            "Megatron runtime",
            f"CUDA context {CUDA_CONTEXT_GIB} + NCCL/workspaces {MEGATRON_RUNTIME_GIB} (fixed)",
            (CUDA_CONTEXT_GIB + MEGATRON_RUNTIME_GIB) * GIB,
        )
    ]


def _vllm_asleep_bytes(lay: Layout) -> float:
    graphs = 0 if lay.vllm_enforce_eager else VLLM_CUDA_GRAPHS_GIB
    return (CUDA_CONTEXT_GIB + VLLM_RUNTIME_GIB + graphs) * GIB


def _vllm_asleep_text(lay: Layout) -> str:
    graphs = 0 if lay.vllm_enforce_eager else VLLM_CUDA_GRAPHS_GIB
    return (
        f"sleeping vLLM worker: CUDA context {CUDA_CONTEXT_GIB} + NCCL {VLLM_RUNTIME_GIB} "
        f"+ CUDA graphs {graphs} (fixed; sleep level 1 frees weights and KV cache only)"
    )


def logprob_phase(arch: Architecture, lay: Layout, vllm_asleep: float) -> Phase:
    """Policy / reference log-probabilities on the last stage (grads, optimizer offloaded)."""
    _, last_layers = stage_layers(lay, arch)
    params = last_layers * arch.layer_params + arch.head_params
    if lay.pp == 1 or arch.tied_embeddings:
        params += arch.embedding_params
    params /= lay.tp
    pbytes = _dtype_bytes(lay.precision)
    tokens = lay.logprob_mb_tokens // lay.cp
    per_token, how = activation_bytes_per_token(arch, lay.tp, lay.sequence_parallel)
    logits = logits_term(arch, lay, tokens, "logprob micro-batch")
    layer = tokens * per_token
    # Forward only: a layer's intermediates are freed before the next layer runs, and all of
    # them before the logits exist, so the peak is the larger of the two.
    terms = [
        Term("parameters", f"{_b(params)} x {pbytes} B", params * pbytes),
        Term(
            "forward peak",
            f"max(one layer {gib(layer)} = {tokens:,} tokens x {per_token:,} B [{how}]; "
            f"logits {gib(logits.bytes)} = {logits.arithmetic})",
            max(layer, logits.bytes),
        ),
        *_megatron_runtime_terms(),
    ]
    if vllm_asleep:
        terms.append(Term("vLLM asleep", _vllm_asleep_text(lay), vllm_asleep))
    return Phase("logprobs", "last pipeline stage, gradients and optimizer offloaded", terms)


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
    first_layers, _ = stage_layers(lay, arch)
    params = (first_layers * arch.layer_params + arch.embedding_params) / lay.tp
    pbytes = _dtype_bytes(lay.precision)
    vllm_weights = vllm_weight_bytes(arch, lay.vllm_tp, lay.vllm_pp)
    return Phase(
        "refit",
        "weights streamed from Megatron into the woken vLLM (gradients, optimizer offloaded)",
        [
            Term("Megatron weights", f"{_b(params)} x {pbytes} B", params * pbytes),
            Term(
                "vLLM weights",
                f"{arch.total_params / 1e9:.3f} B params x 2 B / (vLLM TP {lay.vllm_tp} x PP "
                f"{lay.vllm_pp})",
                vllm_weights,
            ),
            *_megatron_runtime_terms(),
            Term(
                "vLLM runtime",
                f"CUDA context {CUDA_CONTEXT_GIB} + NCCL {VLLM_RUNTIME_GIB} (fixed)",
                (CUDA_CONTEXT_GIB + VLLM_RUNTIME_GIB) * GIB,
            ),
        ],
    )


def generation_phase(arch: Architecture, lay: Layout, capacity: float) -> Phase:
    """vLLM claims utilization x GPU; the rest of the GPU must hold the sleeping trainer."""
    claim = lay.vllm_gpu_memory_utilization * capacity
    weights = vllm_weight_bytes(arch, lay.vllm_tp, lay.vllm_pp)
    profile = vllm_profile_bytes(arch, lay.vllm_tp, VLLM_PROFILE_TOKENS_LLM, VLLM_MAX_NUM_SEQS)
    graphs = 0 if lay.vllm_enforce_eager else VLLM_CUDA_GRAPHS_GIB * GIB
    runtime = (CUDA_CONTEXT_GIB + VLLM_RUNTIME_GIB) * GIB + graphs
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
        terms.append(
            Term(
                "Megatron asleep",
                f"CUDA context {CUDA_CONTEXT_GIB} + NCCL/workspaces {MEGATRON_RUNTIME_GIB} "
                "(weights, gradients, optimizer offloaded to CPU)",
                (CUDA_CONTEXT_GIB + MEGATRON_RUNTIME_GIB) * GIB,
            )
        )
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
    runtime = (CUDA_CONTEXT_GIB + VLLM_RUNTIME_GIB) * GIB
    left = claim - weights - profile - runtime
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
            Term(
                "runtime",
                f"CUDA context {CUDA_CONTEXT_GIB} + NCCL {VLLM_RUNTIME_GIB} (fixed)",
                (CUDA_CONTEXT_GIB + VLLM_RUNTIME_GIB) * GIB,
            ),
        ],
    )


def host_memory_terms(arch: Architecture, lay: Layout) -> list[Term]:
    """CPU RAM per node for what colocated NeMo-RL offloads between phases."""
    first_layers, _ = stage_layers(lay, arch)
    params = (first_layers * arch.layer_params + arch.embedding_params) / lay.tp
    pbytes = _dtype_bytes(lay.precision)
    gbytes = 4 if lay.grad_reduce_in_fp32 else pbytes
    shards = lay.dp * lay.cp if lay.distributed_optimizer else 1
    state = ((4 if pbytes == 2 else 0) + (8 if lay.optimizer == "adam" else 4)) / shards
    per_gpu = params * (pbytes + gbytes + state + pbytes)  # weights, grads, optimizer, reference
    n = lay.gpus_per_node
    terms = [
        Term(
            "Megatron offload",
            f"{n} GPUs x {_b(params)} x ({pbytes} weights + {gbytes} grads + {state:.2f} "
            f"optimizer + {pbytes} reference copy) B",
            n * per_gpu,
        )
    ]
    if lay.colocated and lay.generation_backend == "vllm":
        vllm = vllm_weight_bytes(arch, lay.vllm_tp, lay.vllm_pp)
        terms.append(Term("vLLM sleep", f"{n} GPUs x {gib(vllm)} weights", n * vllm))
    return terms


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
    asleep = _vllm_asleep_bytes(lay) if colocated_vllm else 0.0
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
    if isinstance(judge, ServedJudgeConfig):
        name = classifier_model or CLASSIFIER_FOR_TEMPLATE[judge.template]
        classifier = resolve_architecture(name, "--classifier-model")
        # vLLM serves up to the model's own length unless told otherwise; its KV cache must
        # hold one such sequence. Unknown length: the judge's input budget.
        max_len = (
            classifier_max_model_len
            or classifier.max_positions
            or judge.max_length
            or PAIR_TEMPLATES[judge.template].max_length
        )
        phases.append(
            classifier_phase(classifier, capacity, classifier_gpu_memory_utilization, max_len)
        )
    microbatches = lay.train_global_batch_size // max(1, lay.dp * lay.train_micro_batch_size)
    if lay.pp > 1 and microbatches < lay.pp:
        notes.append(
            f"only {microbatches} micro-batches per step per DP rank (< PP {lay.pp}): "
            "the pipeline never fills"
        )
    return Plan(arch, lay, capacity_gib, phases, notes, host_memory_terms(arch, lay))


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


@dataclass
class Labelled:
    label: str
    plan: Plan


def render(plan: Plan, others: Sequence[Labelled] = (), target_label: str | None = None) -> str:
    lay, arch = plan.layout, plan.arch
    vllm = (
        f"vLLM TP {lay.vllm_tp} x PP {lay.vllm_pp}, gpu_memory_utilization "
        f"{lay.vllm_gpu_memory_utilization}, max_model_len {lay.vllm_max_model_len:,}, "
        f"{'colocated' if lay.colocated else 'own GPUs'}"
    )
    out = [
        f"model   {arch.describe()}",
        f"layout  policy on {lay.policy_nodes} node(s) x {lay.policy_gpus_per_node} GPUs = "
        f"{lay.world_size} (cluster {lay.num_nodes} x {lay.gpus_per_node}"
        f"{', reward model ' + lay.reward_model if lay.reward_model else ''}); "
        f"Megatron TP {lay.tp} x PP {lay.pp} x CP {lay.cp} -> DP {lay.dp}; "
        f"sequence parallel {'on' if lay.sequence_parallel else 'off'}; activation "
        f"checkpointing {'on' if lay.activation_checkpointing else 'off'}; {lay.precision}",
        f"tokens  {lay.train_mb_tokens:,} per training micro-batch, {lay.logprob_mb_tokens:,} "
        f"per logprob micro-batch; {vllm}",
        "",
        f"Per-GPU peaks, {target_label or 'target GPU'} ({plan.capacity_gib:.1f} GiB):",
    ]
    width = max(len(t.label) for p in plan.phases for t in p.terms)
    for phase in plan.phases:
        out.append(f"[{phase.name}] {phase.where}")
        for term in phase.terms:
            out.append(f"  {term.label:<{width}}  {gib(term.bytes):>11}  = {term.arithmetic}")
        out.append(f"  {'total':<{width}}  {gib(phase.total):>11}")
        if phase.extra_check:
            out.append(f"  check: {phase.extra_check[1]}")
    out.append("[host RAM per node] what colocated NeMo-RL offloads to CPU between phases")
    for term in plan.host_terms:
        out.append(f"  {term.label:<{width}}  {gib(term.bytes):>11}  = {term.arithmetic}")
    out.append(f"  {'total':<{width}}  {gib(sum(t.bytes for t in plan.host_terms)):>11}")
    out.append("")
    out.append("Verdict:")
    for label, p in [(target_label or "this GPU", plan), *[(o.label, o.plan) for o in others]]:
        out.append(f"  {label:<18} {verdict_line(p)}")
    out.extend(f"note: {n}" for n in plan.notes)
    return "\n".join(out)


def verdict_line(plan: Plan) -> str:
    capacity = plan.capacity_gib * GIB
    fits, tight = plan.verdict()
    worst = max((p for p in plan.phases if not p.reservation), key=lambda p: p.total)
    failed = list(
        dict.fromkeys(
            p.name
            for p in plan.phases
            if p.total > capacity or (p.extra_check is not None and not p.extra_check[0])
        )
    )
    head = f"({plan.capacity_gib:.1f} GiB): "
    if not fits:
        return head + f"DOES NOT FIT ({', '.join(failed)}; peak {gib(worst.total)})"
    free = capacity - worst.total
    word = "fits, tight" if tight else "fits"
    return head + f"{word}: peak {gib(worst.total)} in {worst.name}, {gib(free)} free"


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def detect_gpu_memory_gib() -> float | None:
    """memory.total of GPU 0 from nvidia-smi, or None when there is no GPU here."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return int(out.split()[0]) / 1024
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def layout_env(cfg: dict[str, Any]) -> str:
    """The facts a launcher needs from the config, as shell assignments (`source`-able)."""
    lay = read_layout(cfg)
    judge = lay.darling.judge
    values = {
        "CFG_NUM_NODES": lay.num_nodes,
        "CFG_GPUS_PER_NODE": lay.gpus_per_node,
        "CFG_MODEL": lay.model,
        "CFG_JUDGE_KIND": judge.kind,
        # The classifier the servers load: the reference checkpoint of the pair template.
        "CFG_CLASSIFIER_MODEL": (
            CLASSIFIER_FOR_TEMPLATE[judge.template] if isinstance(judge, ServedJudgeConfig) else ""
        ),
        "CFG_CHECKPOINT_DIR": _get_or(cfg, "checkpointing.checkpoint_dir", ""),
        # The launcher requeues a run NeMo-RL stopped at its save deadline below this step.
        "CFG_MAX_NUM_STEPS": _get_or(cfg, "grpo.max_num_steps", ""),
    }
    return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="darling-plan",
        description="Estimate per-GPU memory of a NeMo-RL Megatron GRPO config before launch.",
    )
    p.add_argument("config", help="NeMo-RL YAML config (defaults: chains are followed)")
    p.add_argument("overrides", nargs="*", help="a.b=c overrides, as the recipe takes them")
    p.add_argument(
        "--gpu-memory",
        default=None,
        help="GiB per GPU of the target cluster, or 'auto' (nvidia-smi). The report always "
        "also judges 80 GB and 141 GB GPUs.",
    )
    p.add_argument("--check", action="store_true", help="exit 3 if it does not fit the target")
    p.add_argument("--model-config", help="config.json of the policy model (instead of table)")
    p.add_argument("--classifier-model", help="classifier served for darling.judge (name/path)")
    p.add_argument(
        "--classifier-gpu-memory-utilization",
        type=float,
        default=CLASSIFIER_GPU_MEMORY_UTILIZATION,
    )
    p.add_argument(
        "--classifier-max-model-len",
        type=int,
        default=None,
        help="--max-model-len of the classifier servers (default: the model's own)",
    )
    p.add_argument("--layout-env", help="also write the launcher's facts to this file")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        target: float | None
        target_label = None
        if args.gpu_memory == "auto":
            target = detect_gpu_memory_gib()
            target_label = "this GPU (nvidia-smi)" if target else None
        elif args.gpu_memory is not None:
            try:
                target = float(args.gpu_memory)
            except ValueError:
                raise ConfigError(
                    f"--gpu-memory: expected GiB or 'auto', got {args.gpu_memory!r}"
                ) from None
            target_label = f"--gpu-memory {target:g}"
        else:
            target = None
        kwargs = dict(
            model_config=args.model_config,
            classifier_model=args.classifier_model,
            classifier_gpu_memory_utilization=args.classifier_gpu_memory_utilization,
            classifier_max_model_len=args.classifier_max_model_len,
        )
        standard = [
            Labelled(label, make_plan(cfg, size, **kwargs)) for label, size in STANDARD_GPUS.items()
        ]
        if target is not None:
            main_plan = make_plan(cfg, target, **kwargs)
            others = standard
        else:
            main_plan, others = standard[0].plan, standard[1:]
            target_label = standard[0].label
        if args.layout_env:
            Path(args.layout_env).write_text(layout_env(cfg))
    except ConfigError as err:
        print(f"darling-plan: {err}", file=sys.stderr)
        return 2
    print(render(main_plan, others, target_label))
    if args.gpu_memory == "auto" and target is None:
        print("note: no nvidia-smi here; judged against the standard GPU sizes only")
    if args.check:
        fits, _ = main_plan.verdict()
        if not fits:
            print(
                f"darling-plan: the config does not fit {target_label}; nothing launched. "
                "Change the parallel layout (policy.megatron_cfg.*, vllm_cfg.*) or set "
                "DARLING_SKIP_PLAN=1 if you know better.",
                file=sys.stderr,
            )
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
