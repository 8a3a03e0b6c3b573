"""Judge cost per step (darling_nemo.judges.cost) against hand arithmetic."""

from __future__ import annotations

import pytest

from darling_nemo.judges.cost import (
    H100_BF16_DENSE_FLOPS,
    MATH_CLASSIFIER,
    PREFILL_MFU,
    classifier_gpus_needed,
    forward_flops_per_token,
    judge_seconds_per_step,
    tokens_per_s_per_gpu,
)
from darling_nemo.plan import Architecture


def test_judge_seconds_hand_cases():
    # 1,000 pairs x 500 tokens = 500,000 tokens over 2 GPUs x 50,000 tokens/s = 5 s,
    # plus 3 calls x 0.5 s = 1.5 s
    assert judge_seconds_per_step(1000, 500, 50_000, 2, 0.5, 3) == pytest.approx(6.5)
    # no latency, one GPU: tokens / rate
    assert judge_seconds_per_step(10, 100, 1_000, 1, 0.0, 7) == pytest.approx(1.0)


def test_classifier_gpus_needed_hand_cases():
    # 500,000 tokens at 50,000 tokens/s per GPU within 6.5 s - 3 x 0.5 s = 5 s: 2 GPUs
    assert classifier_gpus_needed(1000, 500, 50_000, 0.5, 3, 6.5) == 2
    # a little less time: 500,000 / (50,000 x 4.9) = 2.04 -> 3 GPUs
    assert classifier_gpus_needed(1000, 500, 50_000, 0.5, 3, 6.4) == 3
    with pytest.raises(ValueError, match=r"7 judge calls x 1s latency already exceed 5s"):
        classifier_gpus_needed(1000, 500, 50_000, 1.0, 7, 5.0)


def test_flops_per_token_hand_case():
    # hidden 4, 2 layers, 1 head of 4 (q 4, kv 4), MLP 8, vocab 10, tied, no labels:
    # layer = 4*4 + 2*4*4 + 4*4 (attention 64) + 3*4*8 (MLP 96) + 2*4 (norms 8) = 168
    # weights = 2 x 168 + final norm 4 = 340 -> 2 x 340 = 680 FLOPs
    # attention at 10 tokens, causal mean context 5: 4 x 2 layers x 4 x 5 = 160
    tiny = Architecture("tiny", 4, 2, 1, 1, 4, 8, 10, True)
    assert forward_flops_per_token(tiny, 10) == 680 + 160
    # an encoder attends to all 10 tokens: 4 x 2 x 4 x 10 = 320
    encoder = Architecture("enc", 4, 2, 1, 1, 4, 8, 10, True, encoder=True)
    assert forward_flops_per_token(encoder, 10) == 680 + 320


def test_the_readme_figures_for_the_papers_math_step():
    # Qwen3-4B classifier: 36 layers x 100,930,816 weights + head 2 x 2,560 + norm 2,560
    flops = forward_flops_per_token(MATH_CLASSIFIER, 4096)
    assert flops == 2 * (36 * 100_930_816 + 7_680) + 4 * 36 * 4096 * 2048  # 8.475e9
    rate = tokens_per_s_per_gpu(flops, H100_BF16_DENSE_FLOPS, PREFILL_MFU)
    assert rate == pytest.approx(989e12 * 0.4 / 8.475e9, rel=1e-3)  # ~46,700 tokens/s
    # all 28 x 256 = 7,168 pairs of 4,096 tokens on 8 GPUs, one call of 0.5 s:
    # 29,360,128 tokens / (8 x 46,679) = 78.6 s + 0.5 s
    seconds = judge_seconds_per_step(7168, 4096, rate, 8, 0.5, 1)
    assert seconds == pytest.approx(29_360_128 / (8 * rate) + 0.5)
    assert 78 < seconds < 80
