"""Pairs/s of the math classifier's architecture with and without a cached `CLS a SEP` prefix.

    python darling_nemo/bench/prefix_gpu.py [--tiny] [--out FILE]

Self-contained (torch and transformers only) so it runs as a copied file on a GPU machine
with no network: the model is Qwen3-4B's shape as `Qwen3ForSequenceClassification` with 2
labels, built from a config written here, random weights, bf16 on CUDA (float32 on CPU).
A group of 8 responses of about 2,040 tokens gives 28 ordered pairs i < j, each
`CLS a SEP b SEP` (about 4,083 tokens). Measured, after a warm-up:

- full: every pair's whole input, batched --batch pairs per forward pass (a server's batch);
- cached: the key/value cache of `CLS a SEP` computed once per first response, then that
  response's `b SEP` suffixes scored in one batch against the cache repeated over the batch.

Each line starting `PREFIX-GPU` is a figure; the cached logits are compared with the full
ones (bf16 tolerance on a GPU). --tiny shrinks the model and the responses so the script
can be checked on a CPU before a device run.
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForSequenceClassification

# Qwen/Qwen3-4B config.json; the classifier (Qwen3-Embedding-4B + a 2-label head) shares it.
QWEN3_4B = {
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
}
TINY = {
    **QWEN3_4B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
}
PAD, CLS, SEP = 0, 1, 2  # token ids; random response tokens are drawn above them


def lower_right_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Causal attention aligned bottom-right: suffix queries see the whole cached prefix.

    Hugging Face's sdpa path hands a cached suffix (queries fewer than keys) an explicit mask
    tensor, which keeps PyTorch off its flash kernel; `causal_lower_right` says the same
    thing without a tensor. Valid only without padding (the benchmark has none).
    """
    from torch.nn.attention.bias import causal_lower_right

    del attention_mask, kwargs
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    bias = causal_lower_right(query.shape[2], key.shape[2])
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=bias, scale=scaling
    )
    return out.transpose(1, 2).contiguous(), None


def use_attention(model, name: str) -> None:
    if name == "lower_right":
        from transformers import AttentionInterface

        AttentionInterface.register("lower_right", lower_right_attention)
    model.config._attn_implementation = name


def build_model(tiny: bool, device: str, dtype: torch.dtype) -> Qwen3ForSequenceClassification:
    fields = dict(TINY if tiny else QWEN3_4B)
    try:
        config = Qwen3Config(**fields, num_labels=2, pad_token_id=PAD)
    except TypeError:  # a transformers that takes rope settings only as rope_parameters
        theta = fields.pop("rope_theta")
        rope = {"rope_type": "default", "rope_theta": theta}
        config = Qwen3Config(**fields, rope_parameters=rope, num_labels=2, pad_token_id=PAD)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # initialised on the GPU: 4B random weights in seconds
            model = Qwen3ForSequenceClassification(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def pair_ids(responses: torch.Tensor, i: int, j: int) -> torch.Tensor:
    cls, sep = responses.new_tensor([CLS]), responses.new_tensor([SEP])
    return torch.cat([cls, responses[i], sep, responses[j], sep])


@torch.inference_mode()
def full_logits(model, responses: torch.Tensor, pairs: list, batch: int) -> torch.Tensor:
    out = []
    for start in range(0, len(pairs), batch):
        ids = torch.stack([pair_ids(responses, i, j) for i, j in pairs[start : start + batch]])
        out.append(model(input_ids=ids).logits.float())
    return torch.cat(out)


@torch.inference_mode()
def cached_logits(model, responses: torch.Tensor, n: int, batched: bool) -> torch.Tensor:
    """Pairs in the order (0,1),(0,2)..(n-2,n-1), each first response's prefix computed once.

    batched: a first response's suffixes go in one pass against the cache repeated over the
    batch; else one pass per suffix against a copy of the cache (the cache grows by the
    suffix in a pass, so each pass gets its own copy).
    """
    cls, sep = responses.new_tensor([[CLS]]), responses.new_tensor([[SEP]])
    out = []
    for i in range(n - 1):
        prefix = torch.cat([cls, responses[i : i + 1], sep], dim=1)
        cache = model(input_ids=prefix, use_cache=True).past_key_values
        # every b_j SEP for j > i: equal lengths here, so no padding
        suffixes = torch.cat([responses[i + 1 :], sep.expand(n - 1 - i, 1)], dim=1)
        if batched:
            batch_cache = copy.deepcopy(cache)
            batch_cache.batch_repeat_interleave(n - 1 - i)
            out.append(model(input_ids=suffixes, past_key_values=batch_cache).logits.float())
            continue
        for suffix in suffixes:
            one = model(input_ids=suffix[None], past_key_values=copy.deepcopy(cache))
            out.append(one.logits.float())
    return torch.cat(out)


def timed(fn, device: str, reps: int) -> tuple[float, torch.Tensor]:
    result = fn()  # warm-up (kernels chosen, allocator grown)
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        result = fn()
    sync(device)
    return (time.perf_counter() - start) / reps, result


def cached_line(
    batched: bool, seconds: float, pairs: int, cached_tokens: int, full_tokens: int, lines: list
) -> str:
    full_s = min(
        float(line.split("s_per_group=")[1].split()[0]) for line in lines if " full " in line
    )
    return (
        f"PREFIX-GPU cached batched={batched} s_per_group={seconds:.4f} "
        f"pairs_per_s={pairs / seconds:.2f} computed_tokens_per_s={cached_tokens / seconds:.0f} "
        f"pair_tokens_per_s={full_tokens / seconds:.0f} speedup_vs_best_full={full_s / seconds:.3f}"
    )


def run(args: argparse.Namespace) -> list[str]:
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    length = 24 if args.tiny else args.response_tokens
    vocab = TINY["vocab_size"] if args.tiny else QWEN3_4B["vocab_size"]
    n = args.group
    torch.manual_seed(0)
    model = build_model(args.tiny, device, dtype)
    responses = torch.randint(3, vocab, (n, length), device=device)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    pair_tokens = 2 * length + 3
    full_tokens = len(pairs) * pair_tokens
    cached_tokens = (n - 1) * (length + 2) + len(pairs) * (length + 1)
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    lines = [
        f"PREFIX-GPU env device={device} gpu={gpu!r} torch={torch.__version__} "
        f"transformers={transformers.__version__} dtype={dtype} tiny={args.tiny}",
        f"PREFIX-GPU shape group={n} pairs={len(pairs)} response_tokens={length} "
        f"pair_tokens={pair_tokens} full_prefill_tokens={full_tokens} "
        f"cached_prefill_tokens={cached_tokens} saved={1 - cached_tokens / full_tokens:.3f}",
    ]
    print(lines[-2], lines[-1], sep="\n", flush=True)
    for attention in args.attn:
        try:
            use_attention(model, attention)
        except Exception as err:  # an attention API this transformers lacks: say so, go on
            lines.append(f"PREFIX-GPU attn={attention} FAILED {type(err).__name__}: {err}")
            print(lines[-1], flush=True)
            continue
        lines.append(f"PREFIX-GPU attn={attention}")
        print(lines[-1], flush=True)
        measure(args, model, responses, pairs, (full_tokens, cached_tokens), device, lines)
    return lines


def measure(args, model, responses, pairs, tokens, device, lines) -> None:
    """The full and cached timings and their logits' agreement, appended to lines."""
    full_tokens, cached_tokens = tokens
    n = args.group
    start_line = len(lines)
    results = {}
    for batch in args.batch:
        seconds, full = timed(
            lambda b=batch: full_logits(model, responses, pairs, b), device, args.reps
        )
        results[f"full_b{batch}"] = full
        lines.append(
            f"PREFIX-GPU full batch={batch} s_per_group={seconds:.4f} "
            f"pairs_per_s={len(pairs) / seconds:.2f} tokens_per_s={full_tokens / seconds:.0f}"
        )
        print(lines[-1], flush=True)
    cached = None
    for batched in (True, False):
        try:
            seconds, logits = timed(
                lambda b=batched: cached_logits(model, responses, n, b), device, args.reps
            )
        except Exception as err:  # a cache API this transformers lacks: say so, go on
            lines.append(f"PREFIX-GPU cached batched={batched} FAILED {type(err).__name__}: {err}")
            print(lines[-1], flush=True)
            continue
        cached = logits if cached is None else cached
        lines.append(
            cached_line(
                batched, seconds, len(pairs), cached_tokens, full_tokens, lines[start_line:]
            )
        )
        print(lines[-1], flush=True)
    if cached is None:
        return
    full = results[f"full_b{args.batch[0]}"]
    p_full, p_cached = full.softmax(-1)[:, -1], cached.softmax(-1)[:, -1]
    lines.append(
        f"PREFIX-GPU equal max_abs_logit_diff={(full - cached).abs().max().item():.3e} "
        f"max_abs_p_similar_diff={(p_full - p_cached).abs().max().item():.3e} "
        f"same_verdicts={int(((p_full > 0.5) == (p_cached > 0.5)).sum())}/{len(pairs)} "
        f"logit_scale={full.abs().max().item():.3e}"
    )
    print(lines[-1], flush=True)
    if device == "cuda":
        gib = torch.cuda.max_memory_allocated() / 2**30
        lines.append(f"PREFIX-GPU memory max_allocated_gib={gib:.1f}")
        print(lines[-1], flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny config: a CPU check")
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even with a GPU")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response-tokens", type=int, default=2040)
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 7, 1])
    parser.add_argument("--attn", nargs="+", default=["sdpa", "lower_right"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the PREFIX-GPU lines here")
    args = parser.parse_args(argv)
    lines = run(args)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
