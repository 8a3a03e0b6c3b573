"""One CUDA GPU, torch and transformers only (no vLLM, no NeMo-RL, no network).

    uv run --group dev pytest -m gpu -s        # -s shows the measured figures (GPU-FIGURE lines)

Skipped where torch sees no CUDA device. Every model is tiny and built here from a config
(or is the MiniLM the package ships). What is checked against what:
- the cross-encoder, embedding and served judges give the same P(similar) on CUDA as on CPU
  (float32 both sides), and their pairs/s on each device is printed;
- the TRL engine (conf/local/math_trl.yaml) and the miniature (recipes/darling_mini.py at
  toy scale) run on CUDA and log the same DARLING metrics as on CPU, within a tolerance:
  sampling draws from a different random stream on each device, so the responses differ;
  the check is that both devices compute the same quantities in the same range;
- darling-plan's per-token arithmetic (parameters x 2 B; logits x 12 B for NeMo-RL's fp32
  log-softmax) against torch.cuda.max_memory_allocated for a tiny Llama.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from helpers import REPO, saved_decoder_config  # noqa: E402 (after the torch import-or-skip)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}  # a child process that sees no GPU


def figure(text: str) -> None:
    print(f"GPU-FIGURE {torch.cuda.get_device_name(0)}: {text}")


def nb_pairs(count: int) -> list[tuple[str, str]]:
    from darling_nemo.bench.partition import NOVELTYBENCH_PAIRS, load_noveltybench_pairs

    return [(p.a, p.b) for p in load_noveltybench_pairs(NOVELTYBENCH_PAIRS)][:count]


# ---------------------------------------------------------------------------------------------
# Judges
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory) -> str:
    from darling_nemo.judges.tiny import save_tiny_classifier

    return str(save_tiny_classifier(tmp_path_factory.mktemp("clf") / "tiny", "bert"))


def judged(config, pairs) -> tuple[list[float], float]:
    from darling_nemo.bench.judges import pairs_per_second
    from darling_nemo.judges import make_judge

    judge = make_judge(config)
    rate, _ = pairs_per_second(judge, pairs)
    scores = judge(pairs)
    close = getattr(judge, "close", None)
    if callable(close):
        close()
    return scores, rate


def test_cross_encoder_on_cuda_matches_cpu(tiny_classifier):
    from darling_nemo.schema import CrossEncoderJudgeConfig

    pairs = nb_pairs(256)
    common = {"model": tiny_classifier, "template": "modernbert", "dtype": "float32"}
    cpu, cpu_rate = judged(CrossEncoderJudgeConfig(**common, device="cpu"), pairs)
    gpu, gpu_rate = judged(CrossEncoderJudgeConfig(**common, device="cuda"), pairs)
    assert gpu == pytest.approx(cpu, abs=1e-4)
    figure(f"cross-encoder (tiny BERT, fp32): {gpu_rate:.0f} pairs/s CUDA, {cpu_rate:.0f} CPU")


def test_embedding_judge_on_cuda_matches_cpu():
    from darling_nemo.schema import EmbeddingJudgeConfig

    pairs = nb_pairs(256)
    cpu, cpu_rate = judged(EmbeddingJudgeConfig(device="cpu", cache_size=0), pairs)
    gpu, gpu_rate = judged(EmbeddingJudgeConfig(device="cuda", cache_size=0), pairs)
    assert gpu == pytest.approx(cpu, abs=1e-3)
    figure(
        f"embedding (shipped MiniLM, calibrated): {gpu_rate:.0f} pairs/s CUDA, {cpu_rate:.0f} CPU"
    )


def serve(model: str, device: str) -> tuple[subprocess.Popen, str]:
    """darling_nemo.classify_server on 127.0.0.1 (vLLM's /classify protocol) on `device`."""
    from darling_nemo.bench.judges import server_url, start_server

    env = {**os.environ, **(CPU_ONLY if device == "cpu" else {}), "HF_HUB_OFFLINE": "1"}
    options = ("--device", device, "--dtype", "float32")
    proc = start_server(model, "similarity_gpu_0", *options, env=env, cwd=REPO)
    url = server_url(proc)
    if url is None:
        proc.wait()
        pytest.fail(f"classify_server on {device} did not start (exit {proc.returncode})")
    return proc, url


def test_served_judge_against_a_cuda_server_matches_cpu(tiny_classifier):
    from darling_nemo.schema import CrossEncoderJudgeConfig, ServedJudgeConfig

    pairs = nb_pairs(256)
    common = {"template": "modernbert", "truncation": "tokens", "max_length": 128}
    cpu, _ = judged(
        CrossEncoderJudgeConfig(model=tiny_classifier, device="cpu", dtype="float32", **common),
        pairs,
    )
    rates = {}
    for where in ("cpu", "cuda"):
        proc, url = serve(tiny_classifier, where)
        try:
            config = ServedJudgeConfig(
                endpoints=[{"url": url, "model": "similarity_gpu_0"}],
                tokenizer=tiny_classifier,
                pairs_per_request=64,
                **common,
            )
            scores, rates[where] = judged(config, pairs)
        finally:
            proc.terminate()
            proc.wait()
        assert scores == pytest.approx(cpu, abs=1e-4), where
    figure(
        f"served (tiny BERT, fp32, 64 pairs/request): {rates['cuda']:.0f} pairs/s CUDA server, "
        f"{rates['cpu']:.0f} CPU server"
    )


# ---------------------------------------------------------------------------------------------
# The TRL engine and the miniature
# ---------------------------------------------------------------------------------------------

# Absolute tolerance on metrics in [0, 1] averaged over the run's steps: the two devices
# sample different responses (different random streams), so only the range is shared.
METRIC_TOLERANCE = 0.25


def run_child(args: list[str], env_extra: dict[str, str]) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **env_extra}
    proc = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def mean_metrics(log: Path, keys: tuple[str, ...]) -> dict[str, float]:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {k: sum(r[k] for r in rows) / len(rows) for k in keys}


def test_trl_engine_on_cuda_logs_the_cpu_darling_metrics(tmp_path):
    keys = ("darling/quality_mean", "darling/diversity_mean")
    means = {}
    for device, env in (("cpu", CPU_ONLY), ("cuda", {})):
        out = tmp_path / device
        run_child(
            [
                "recipes/darling_math.py",
                "--config",
                "conf/local/math_trl.yaml",
                f"output_dir={out}",
            ],
            env,
        )
        means[device] = mean_metrics(out / "train_log.jsonl", keys)
    for key in keys:
        assert means["cuda"][key] == pytest.approx(means["cpu"][key], abs=METRIC_TOLERANCE), key
    figure(f"TRL engine, conf/local/math_trl.yaml, means over its steps: {means}")


def test_the_miniature_on_cuda_logs_the_cpu_darling_metrics(tmp_path):
    toy = [
        "seeds=[3]",
        "warm_start.steps=5",
        "trainer.max_steps=2",
        "evaluation.every_steps=1",
        "evaluation.num_samples=4",
        "evaluation.pass_at_k=[1,4]",
        "logging.report_to=[]",
        "logging.progress_bar=false",
    ]
    keys = ("darling/quality_mean", "darling/diversity_mean")
    means = {}
    for device, env in (("cpu", CPU_ONLY), ("cuda", {})):
        out = tmp_path / device
        run_child(["recipes/darling_mini.py", f"output_dir={out}", *toy], env)
        means[device] = mean_metrics(out / "seed-3" / "darling" / "train_log.jsonl", keys)
    for key in keys:
        assert means["cuda"][key] == pytest.approx(means["cpu"][key], abs=METRIC_TOLERANCE), key
    figure(f"miniature (darling arm, 2 steps), means over its steps: {means}")


# ---------------------------------------------------------------------------------------------
# The memory plan's arithmetic
# ---------------------------------------------------------------------------------------------


def test_plan_per_token_arithmetic_for_a_tiny_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from darling_nemo.plan.architectures import architecture_from_hf_config
    from darling_nemo.plan.megatron import LOGIT_BYTES_FP32

    sizes = dict(hidden_size=256, num_hidden_layers=2, intermediate_size=512, vocab_size=32000)
    config = saved_decoder_config(tmp_path, LlamaConfig, **sizes)
    arch = architecture_from_hf_config(tmp_path)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    weights = torch.cuda.memory_allocated() - base
    # parameters x 2 B (bf16): the plan's count is the model's (the allocator rounds each
    # tensor up to 512 B, a few KiB in all)
    assert arch.total_params == sum(p.numel() for p in model.parameters())
    assert weights == pytest.approx(arch.total_params * 2, rel=0.01)

    # Log-probabilities of T tokens as NeMo-RL computes them from Megatron's output: fp32
    # logits (Float16Module casts the bf16 output, which is then freed: 2 + 4 B for a moment),
    # the log-softmax's max-shifted copy (4 B) and its exp (4 B): at most three fp32 tensors
    # of T x V at once, the plan's 12 B per token x vocabulary entry.
    tokens = 2048
    ids = torch.randint(0, config.vocab_size, (1, tokens), device="cuda")
    with torch.no_grad():
        hidden = model.model(ids).last_hidden_state
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        logits = model.lm_head(hidden).float()  # bf16 output freed once cast
        shifted = logits - logits.max(dim=-1, keepdim=True).values
        log_norm = shifted.exp().sum(dim=-1, keepdim=True).log()
        logprobs = (shifted - log_norm).gather(-1, ids.unsqueeze(-1))
        peak = torch.cuda.max_memory_allocated() - before
    del logits, shifted, log_norm, logprobs
    planned = tokens * arch.vocab_size * LOGIT_BYTES_FP32
    assert peak == pytest.approx(planned, rel=0.03), (peak, planned)
    figure(
        f"tiny Llama logits, {tokens} tokens x {arch.vocab_size} vocab: peak {peak / 2**20:.0f} "
        f"MiB, plan {planned / 2**20:.0f} MiB (12 B each); weights {weights / 2**20:.1f} MiB, "
        f"plan {arch.total_params * 2 / 2**20:.1f} MiB"
    )
