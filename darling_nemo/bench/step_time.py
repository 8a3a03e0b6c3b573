"""A GRPO step at paper scale, simulated: DARLING's judge synchronous, overlapped with the
log-probabilities, and judging during generation as well.

    .nemo-rl-cpu/bin/python -m darling_nemo.bench.step_time [--classifier-gpus N] [--scales ...] [--modes ...]

Runs NeMo-RL v0.4.0's real setup() + grpo_train() in the CPU rehearsal (rehearsal/run.py:
private Ray, stand-ins for the GPU workers, classify_server for the served judge) on
conf/math_qwen3_4b_darling.yaml, where every GPU phase and the judge last as long as the
duration model below says (rehearsal/pacing.py; time scaled down, REAL_S_PER_SIMULATED_S),
then reads NeMo-RL's own per-step timers from TensorBoard. Both scales run the math
config's loop (vLLM's async engine: per-sample rollouts); only the durations differ (the
WildChat model folds the reward model's scoring into generation). What the stand-ins
really compute on the CPU (tiny models) and NeMo-RL's own bookkeeping are not modelled;
they show up as `other`.

The rehearsal's step has 2 prompts x 8 responses (56 pairs) where the paper's has 256 x 8
(7,168) or 64 x 8 (1,792): each pair the rehearsal's judge is sent costs the paper's judge
compute / 56, and the judge's threshold is set to 1 (no pair equivalent), so every pair is
judged and a step costs what the reference's all-pairs judge costs at paper scale. Responses
finish as the response-length model says (`pacing.length_fraction`; a share of them at the
cap), which is what judging during generation exploits.

Durations (simulated seconds per step) come from FLOP and bandwidth arithmetic on an
H100 SXM (989 TFLOP/s dense bf16, 3.35 TB/s), stated in `paper_scales()`; the judge is
`judges.cost.judge_seconds_per_step`, the docs/judge-cost.md arithmetic, at the math
classifier's throughput measured on an H100 (`bench.prefix_gpu`, MEASURED_* below).

Mode `overlap+prefix+cache` is `overlap+prefix` with the classifier's prefix cache: a math
pair costs what it costs when the `CLS a SEP` of its first response is reused (served with
LAST pooling, pairs routed by first response: `judges.served`), the measured ratio of the
cached to the full pair time (less than the ratio of prefill tokens, 35 to 56 response
lengths: each suffix still attends to the whole cached prefix). Chunked prefill, which the
same flag turns on, splits a 4,096-token pair into the scheduler's token budget; it changes
when a long pair's tokens run, not how many, so the model leaves the throughput as is. The
ModernBERT (WildChat) classifier is bidirectional: no cache, no change.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from darling_nemo.config import load_config, save_config
from darling_nemo.judges.cost import (
    H100_BF16_DENSE_FLOPS,
    forward_flops_per_token,
    judge_seconds_per_step,
    tokens_per_s_per_gpu,
)
from darling_nemo.plan import KNOWN_MODELS
from darling_nemo.ports import free_port
from darling_nemo.rehearsal.pacing import MODEL_ENV
from darling_nemo.rehearsal.run import (
    Rehearsal,
    logged_scalars,
    prepare,
    run_phase,
    start_judge_server,
    start_ray,
)
from darling_nemo.rehearsal.shrink import PROMPTS_PER_STEP

REPO = Path(__file__).resolve().parents[2]
CONFIG = "conf/math_qwen3_4b_darling.yaml"
TRAIN_MFU = 0.35  # Megatron training / log-prob forward at long sequences (assumed)
SCALES = ("math", "wildchat")  # paper_scales' order
REAL_S_PER_SIMULATED_S = {"math": 0.1, "wildchat": 0.3}
MATH_WORDS = (4_096 - 3) // 2  # words of each response the math classifier reads (reference)
CHAT_WORDS = (2_048 - 3) // 2  # ... the ModernBERT classifier
GENERATIONS = 8  # per prompt, at both paper scales and in the rehearsal
REHEARSAL_PAIRS = PROMPTS_PER_STEP * GENERATIONS * (GENERATIONS - 1) // 2
JUDGE_LATENCY_S = 0.5  # per call: HTTP round trip + the tail of a call (judges.cost)
MODES = {  # name: (darling.overlap, darling.judge_during_generation, darling.prefix_judging)
    "sync": (False, False, False),
    "overlap": (True, False, False),
    "overlap+stream": (True, True, False),
    "overlap+prefix": (True, True, True),
    "overlap+prefix+cache": (True, True, True),  # + the classifier's prefix cache (math)
}
CACHE_MODES = {"overlap+prefix+cache"}
# The math classifier's shape (Qwen3-4B as Qwen3ForSequenceClassification, random weights,
# bf16, Hugging Face transformers 5.17 on one H100 80GB HBM3, torch 2.11): a group of 8
# responses of 2,040 tokens, 28 pairs of 4,083 tokens (docs/results/prefix_gpu_run2.txt,
# `python darling_nemo/bench/prefix_gpu.py`). Full: each pair's whole input, 4 per pass.
# Cached: `CLS a SEP` once per first response, the suffixes in one pass against it, causal
# attention aligned bottom-right (flash-eligible, as vLLM's kernels treat a cached prefix).
MEASURED_FULL_PAIRS_PER_S = 11.05
MEASURED_CACHED_PAIRS_PER_S = 14.49
MEASURED_PAIR_TOKENS = 4_083
MEASURED_TOKENS_PER_S = MEASURED_FULL_PAIRS_PER_S * MEASURED_PAIR_TOKENS  # 45,100 per GPU
CACHED_PAIR_COST = MEASURED_FULL_PAIRS_PER_S / MEASURED_CACHED_PAIRS_PER_S  # 0.76


def prefill_tokens(n: int, response_tokens: int, cached: bool) -> int:
    """Prefill tokens of one group's n(n-1)/2 pairs `CLS a SEP b SEP`; cached: `CLS a SEP`
    once per first response (n - 1 of them), then each pair's `b SEP` alone."""
    pairs = n * (n - 1) // 2
    if not cached:
        return pairs * (2 * response_tokens + 3)
    return (n - 1) * (response_tokens + 2) + pairs * (response_tokens + 1)


# Math text: 0.37 whitespace words per token, measured on OlympiadBench's 846 human
# solutions (MIT; 168,096 words) with GPT-2's byte-level BPE and a Qwen-style pre-tokenizer
# (each digit a token): 454,067 tokens (0.38 with GPT-2's own pre-tokenizer). Qwen3's
# tokenizer was not at hand (no model hub); docs/judge-cost.md says how it was measured.
MATH_WORDS_PER_TOKEN = 0.37
# Chat text (English prose): about 0.75 words per token for BPE vocabularies (assumed).
CHAT_WORDS_PER_TOKEN = 0.75


@dataclass
class Scale:
    name: str
    phases: dict[str, float]  # simulated seconds per step (judge_pair: per rehearsal pair)
    capped_fraction: float  # share of responses that reach max_new_tokens (assumed)
    judge_s: float  # the paper step's judge: all pairs, one call
    notes: list[str]  # where each number comes from
    # tokens until the judge's words are settled / the cap (min 1: at the end)
    settle_fraction: float = 1.0
    cached_pair_cost: float = 1.0  # a pair's judge time with the prefix cache / without

    def model(self, real_s_per_simulated_s: float, cached: bool = False) -> dict[str, object]:
        phases = dict(self.phases)
        if cached and "judge_pair" in phases:
            phases["judge_pair"] *= self.cached_pair_cost
        return {
            "real_s_per_simulated_s": real_s_per_simulated_s,
            "phases": phases,
            "capped_fraction": self.capped_fraction,
            "settle_fraction": self.settle_fraction,
        }


def settle_fraction(words: int, words_per_token: float, cap: int) -> float:
    """The share of a capped response generated when its first `words` words are settled."""
    return min(1.0, words / words_per_token / cap)


def _policy_phases(model: str, tokens: float, seq: int, gpus: int) -> dict[str, float]:
    """Forward (log-probs) and 3x forward (training) over the step's tokens at TRAIN_MFU."""
    flops = forward_flops_per_token(KNOWN_MODELS[model], seq) * tokens
    forward = flops / (gpus * H100_BF16_DENSE_FLOPS * TRAIN_MFU)
    # NeMo-RL v0.4.0 computes the reference log-probs every step, KL or not.
    return {"logprobs": forward, "reference_logprobs": forward, "training": 3 * forward}


def paper_scales(classifier_gpus: int = 8) -> list[Scale]:
    """The math and WildChat scales, the classifier on `classifier_gpus` H100s."""
    gpus = classifier_gpus
    math_tokens = 256 * 8 * (4_096 + 200)  # mean response: half the 8,192 cap (assumed)
    assumed_tps = tokens_per_s_per_gpu(
        forward_flops_per_token(KNOWN_MODELS["dogtooth/qwen3-4b-emb-finetuned-step-70-hf"], 4_096),
        H100_BF16_DENSE_FLOPS,
        0.40,
    )
    math_judge_tps = MEASURED_TOKENS_PER_S
    math_judge = judge_seconds_per_step(7_168, 4_096, math_judge_tps, gpus, 0.0, 0)
    full, cached = prefill_tokens(8, 2_040, False), prefill_tokens(8, 2_040, True)
    math_settle = settle_fraction(MATH_WORDS, MATH_WORDS_PER_TOKEN, 8_192)
    math = Scale(
        f"math: Qwen3-4B, 256 x 8, 8,192 tokens, 64 GPUs; Qwen3-4B classifier, {gpus} GPUs",
        {
            # 10 s refit and math-verify, then a response of the cap takes 8,192 decode steps
            # x 10 ms (32 sequences per GPU: 8 GB of weights + ~9 GB of KV cache per step at
            # ~2 TB/s); a shorter one proportionally less
            "generation": 10.0,
            "generation_decode": 8_192 * 0.010,
            **_policy_phases("Qwen/Qwen3-4B-Base", math_tokens, 4_296, 64),
            "judge_call": JUDGE_LATENCY_S,
            "judge_pair": math_judge / REHEARSAL_PAIRS,
        },
        0.10,
        math_judge + JUDGE_LATENCY_S,
        [
            f"tokens/step 2,048 x 4,296 = {math_tokens / 1e6:.1f} M (mean response 4,096 assumed)",
            "responses: 10% reach the 8,192 cap, the others spread evenly below it (assumed)",
            f"judge reads {MATH_WORDS:,} words of each response = "
            f"{MATH_WORDS / MATH_WORDS_PER_TOKEN:,.0f} tokens at {MATH_WORDS_PER_TOKEN} words/"
            f"token: settled at {math_settle:.0%} of the cap (overlap+prefix)",
            f"policy forward {TRAIN_MFU:.0%} MFU on 64 H100s; training = 3 x forward",
            f"judge: 7,168 pairs x 4,096 tokens / ({math_judge_tps:,.0f} tok/s/GPU x {gpus}) "
            f"= {math_judge:.1f} s, + {JUDGE_LATENCY_S} s per call (tok/s measured on an H100, "
            f"bench.prefix_gpu; the FLOP estimate at 40% MFU was {assumed_tps:,.0f})",
            f"prefix cache (+cache): prefill tokens per group {full:,} -> {cached:,} "
            f"({1 - cached / full:.1%} fewer); measured pair time x {CACHED_PAIR_COST:.3f} "
            f"({MEASURED_FULL_PAIRS_PER_S} -> {MEASURED_CACHED_PAIRS_PER_S} pairs/s per H100): "
            f"judge {math_judge * CACHED_PAIR_COST:.1f} s",
        ],
        math_settle,
        CACHED_PAIR_COST,
    )
    chat_tokens = 64 * 8 * (300 + 700)  # prompt ~300, response ~700 of the 1,024 cap (assumed)
    chat_judge_tps = 200_000  # ModernBERT-base: FLOPs allow ~760k at 30% MFU; vLLM small-batch
    chat_judge = judge_seconds_per_step(1_792, 1_400, chat_judge_tps, gpus, 0.0, 0)
    chat = Scale(
        f"WildChat: Llama-3.1-8B, 64 x 8, 1,024 tokens, 8 GPUs; ModernBERT classifier, {gpus} GPUs",
        {
            # 5 s reward model (Skywork 8B forward over 0.5 M tokens on 8 GPUs) + 3 s refit,
            # then up to 1,024 decode steps x 12 ms (16 GB of weights per step)
            "generation": 5.0 + 3.0,
            "generation_decode": 1_024 * 0.012,
            **_policy_phases("meta-llama/Llama-3.1-8B-Instruct", chat_tokens, 1_000, 8),
            "judge_call": JUDGE_LATENCY_S,
            "judge_pair": chat_judge / REHEARSAL_PAIRS,
        },
        0.05,
        chat_judge + JUDGE_LATENCY_S,
        [
            f"tokens/step 512 x 1,000 = {chat_tokens / 1e6:.2f} M (prompt 300 + response 700)",
            "responses: 5% reach the 1,024 cap, the others spread evenly below it (assumed)",
            f"policy forward {TRAIN_MFU:.0%} MFU on 8 H100s; training = 3 x forward",
            f"judge: 1,792 pairs x 1,400 tokens / ({chat_judge_tps:,} tok/s/GPU x {gpus}) "
            f"= {chat_judge:.1f} s, + {JUDGE_LATENCY_S} s per call",
            f"judge reads {CHAT_WORDS:,} words = {CHAT_WORDS / CHAT_WORDS_PER_TOKEN:,.0f} "
            f"tokens at {CHAT_WORDS_PER_TOKEN} words/token, past the 1,024 cap: settled only "
            "at the end",
        ],
        settle_fraction(CHAT_WORDS, CHAT_WORDS_PER_TOKEN, 1_024),
    )
    return [math, chat]


def _run(r: object, shrunk: Path, name: str, mode: str) -> dict[str, float]:
    """One recipe run of 2 steps; NeMo-RL's timers (real seconds) and DARLING's pair counts
    of step 2."""
    overlap, stream, prefix = MODES[mode]
    cfg = load_config(
        str(shrunk),
        [
            f"darling.overlap={str(overlap).lower()}",
            f"darling.judge_during_generation={str(stream).lower()}",
            f"darling.prefix_judging={str(prefix).lower()}",
            # No pair is ever equivalent, so every pair the lexical rules leave open is
            # judged: the reference's cost (diverse groups), the waves' worst case.
            "darling.judge.threshold=1.0",
            "grpo.val_period=0",
            "checkpointing.enabled=false",
        ],
    )
    stem = r.workdir / f"bench_{name}_{mode}"  # type: ignore[attr-defined]
    save_config(cfg, stem.with_suffix(".yaml"))
    run_phase(r, f"{name} {mode}", stem.with_suffix(".yaml"), 2, stem.with_suffix(".log"))  # type: ignore[arg-type]
    run_dir = sorted((r.workdir / "logs").glob("exp_*"))[-1]  # type: ignore[attr-defined]
    scalars = logged_scalars(run_dir)
    wanted = {
        "darling/pairs_judged",
        "darling/pairs_judged_during_generation",
        "darling/pairs_judged_on_settled_words",
        "darling/judge_cached_tokens",  # the stand-in's prefix cache (served judge)
    }
    return {
        k.removeprefix("timing/train/"): v[2]
        for k, v in scalars.items()
        if (k.startswith("timing/train/") or k in wanted) and 2 in v
    }


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def run_bench(
    workdir: Path, scales: list[Scale], keys: list[str], modes: list[str]
) -> list[tuple[str, str, dict[str, float]]]:
    model = workdir / "step_time_model.json"
    model.write_text(json.dumps(Scale("none", {}, 0.0, 0.0, []).model(1.0)))  # unpaced setup
    r = Rehearsal(REPO / "recipes" / "darling_math.py", CONFIG, [], "math", workdir)
    rows = []
    with ExitStack() as stack:
        # Set before Ray starts (its workers inherit it) and taken back after: a process
        # that runs the benchmark and then rehearses (a test session) must not pace those.
        previous = os.environ.get(MODEL_ENV)
        os.environ[MODEL_ENV] = str(model)
        stack.callback(_restore_env, MODEL_ENV, previous)
        port = free_port()
        shrunk, _, cfg = prepare(r, f"http://127.0.0.1:{port}")
        start_judge_server(r, stack, port, None)
        start_ray(r, stack, cfg["cluster"]["gpus_per_node"] * cfg["cluster"]["num_nodes"])
        for scale, key in zip(scales, keys, strict=True):
            factor = REAL_S_PER_SIMULATED_S[key]
            for mode in modes:
                model.write_text(json.dumps(scale.model(factor, mode in CACHE_MODES)))
                started = time.monotonic()
                measured = _run(r, shrunk, key, mode)
                simulated = {
                    k: v if k.startswith("darling/") else v / factor for k, v in measured.items()
                }
                rows.append((scale.name, mode, simulated))
                reused = simulated.get("darling/judge_cached_tokens", 0.0)
                print(
                    f"  {key} {mode}: {time.monotonic() - started:.0f} s real, the stand-in "
                    f"reused {reused:.0f} prompt tokens",
                    flush=True,
                )
    return rows


def report(rows: list[tuple[str, str, dict[str, float]]]) -> str:
    lines = [
        "| scale | judge | step s | generation | log-probs | training | DARLING on the path (darling_judge) | other | overhead | pairs judged (during generation) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, mode, t in rows:
        step, judge = t["total_step_time"], t.get("darling_judge", 0.0)
        logprobs = t.get("policy_and_reference_logprobs", 0.0)
        # Overlapped, the wait for the judge happens inside policy.train's timer.
        training = t.get("policy_training", 0.0) - (judge if MODES[mode][0] else 0.0)
        generation = t.get("generation", 0.0)
        other = step - judge - logprobs - training - generation
        pairs = f"{t.get('darling/pairs_judged', 0):.0f}"
        if "darling/pairs_judged_during_generation" in t:
            pairs += f" ({t['darling/pairs_judged_during_generation']:.0f}"
            if "darling/pairs_judged_on_settled_words" in t:
                pairs += f", {t['darling/pairs_judged_on_settled_words']:.0f} settled early"
            pairs += ")"
        lines.append(
            f"| {name.split(':')[0]} | {mode} | {step:.1f} | {generation:.1f} | {logprobs:.1f} | "
            f"{training:.1f} | {judge:.1f} | {other:.1f} | {judge / (step - judge):.1%} | {pairs} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classifier-gpus", type=int, default=8, help="H100s (default 8)")
    parser.add_argument("--scales", nargs="+", choices=SCALES, default=list(SCALES))
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    args = parser.parse_args(argv)
    if args.classifier_gpus < 1:
        parser.error(f"--classifier-gpus must be at least 1, got {args.classifier_gpus}")
    chosen = [
        (scale, key)
        for scale, key in zip(paper_scales(args.classifier_gpus), SCALES, strict=True)
        if key in args.scales
    ]
    scales, keys = [scale for scale, _ in chosen], [key for _, key in chosen]
    print("duration model (simulated seconds per step):")
    for scale in scales:
        print(f"  {scale.name}")
        for phase, seconds in scale.phases.items():
            print(f"    {phase:<20} {seconds:7.2f}")
        print(f"    {'judge, all pairs':<20} {scale.judge_s:7.2f}")
        for note in scale.notes:
            print(f"    - {note}")
    print(f"time scale (real s per simulated s): {REAL_S_PER_SIMULATED_S}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="darling-step-time-", dir="/tmp"))
    rows = run_bench(workdir, scales, keys, args.modes)
    print(report(rows))
    print(f"(logs in {workdir}; overhead = darling_judge / (step - darling_judge))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
