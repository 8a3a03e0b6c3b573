"""Tiny random models for smoke runs and CI: a 2-layer Llama, its reward-model twin, and a
character-level tokenizer with a chat template. Meaningless outputs, real loading code.

    uv run python -m darling_nemo.evals.tiny /tmp/darling-tiny
    # -> /tmp/darling-tiny/lm (causal LM) and /tmp/darling-tiny/rm (num_labels=1 scorer)
"""

from __future__ import annotations

import argparse
from pathlib import Path

# Plain-text role markers: the character tokenizer spells them out, no special tokens needed.
CHAT_TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]\n{{ m['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}[assistant]\n{% endif %}"
)


def build_tiny_models(
    out_dir: str | Path, seed: int = 0, hidden_size: int = 64, num_heads: int = 4
) -> tuple[Path, Path]:
    """Save a tiny causal LM and a tiny scalar reward model (same tokenizer) under out_dir.

    vLLM's attention kernels want a head size of 64 or more: hidden_size=128, num_heads=2.
    """
    import torch
    from transformers import LlamaForSequenceClassification

    from darling_nemo.trl.policy import char_tokenizer, tiny_llama

    out_dir = Path(out_dir)
    tokenizer = char_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    lm = tiny_llama(
        tokenizer,
        hidden_size=hidden_size,
        num_layers=2,
        num_heads=num_heads,
        intermediate_size=2 * hidden_size,
        max_positions=2048,
    )
    rm_config = type(lm.config)(**lm.config.to_dict())
    rm_config.num_labels = 1
    torch.manual_seed(seed + 1)
    rm = LlamaForSequenceClassification(rm_config)
    paths = []
    for name, model in (("lm", lm), ("rm", rm)):
        model.save_pretrained(out_dir / name)
        tokenizer.save_pretrained(out_dir / name)
        paths.append(out_dir / name)
    return paths[0], paths[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    args = parser.parse_args()
    lm, rm = build_tiny_models(args.out_dir)
    print(f"causal LM: {lm}\nreward model: {rm}")


if __name__ == "__main__":
    main()
