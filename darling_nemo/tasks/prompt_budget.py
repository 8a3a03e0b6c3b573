"""Prompts the policy cannot take: refused at the data check, or cut, and said.

A prompt longer than `task.max_prompt_tokens` (tokens of the policy's tokenizer; a tiny
policy's tokens are the prompt's whitespace words) used to go through silently: a tiny
policy was built with room for it and a 200,000-character question stalled the run for
minutes with no output. `task.long_prompts` decides: `refuse` (default) ends the data check
with the row (`file:line`, its length and the budget), `truncate` cuts the question (math)
or the prompt (chat) so the rendered prompt fits and says how many were cut in one warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from darling_nemo.schema import (
    ChatTaskConfig,
    ConfigError,
    MathTaskConfig,
    PretrainedPolicyConfig,
    RewardFuncsTaskConfig,
    TrlRunConfig,
)

WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class TokenRuler:
    """Counts a text's tokens and cuts a text to its first `n` tokens."""

    count: Callable[[str], int]
    cut: Callable[[str, int], str]


def word_ruler() -> TokenRuler:
    """A tiny policy's word tokenizer: one token per whitespace word."""

    def cut(text: str, n: int) -> str:
        ends = [m.end() for m in WORD.finditer(text)]
        return text[: ends[n - 1]] if n > 0 and ends else ""

    return TokenRuler(lambda text: len(WORD.findall(text)), cut)


def tokenizer_ruler(name_or_path: str) -> TokenRuler:
    """A pretrained policy's own tokenizer (offsets say where its n-th token ends)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def cut(text: str, n: int) -> str:
        if n <= 0:
            return ""
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
        return text[: offsets[min(n, len(offsets)) - 1][1]]

    return TokenRuler(count, cut)


def ruler_for(cfg: TrlRunConfig) -> TokenRuler:
    if isinstance(cfg.policy, PretrainedPolicyConfig):
        return tokenizer_ruler(cfg.policy.name_or_path)
    return word_ruler()


def fit_prompts(
    cfg: TrlRunConfig,
    texts: Sequence[Any],
    render: Callable[[str], str],
    lines: Sequence[int],
) -> list[Any]:
    """The rendered prompts of `texts` (the questions or chat prompts, from the data file's
    `lines`), each within task.max_prompt_tokens: a longer one is a ConfigError naming its
    row, or is cut (task.long_prompts: truncate) with one warning line for all."""
    task = cfg.task
    assert isinstance(task, MathTaskConfig | ChatTaskConfig | RewardFuncsTaskConfig)
    budget, ruler = task.max_prompt_tokens, ruler_for(cfg)
    prompts: list[Any] = []
    cut: list[tuple[int, int]] = []
    for text, line in zip(texts, lines, strict=True):
        if not isinstance(text, str):  # a conversation (chat rows may hold one): as it is
            prompts.append(text)
            continue
        prompt = render(text)
        tokens = ruler.count(prompt)
        if tokens > budget and task.long_prompts == "refuse":
            raise ConfigError(
                f"{task.data_path}:{line}: a prompt of {tokens} tokens, over "
                f"task.max_prompt_tokens={budget} (the policy's prompt budget): shorten or "
                "drop the row, raise task.max_prompt_tokens, or set task.long_prompts=truncate"
            )
        if tokens > budget:
            kept = max(0, ruler.count(text) - (tokens - budget))
            prompt = render(ruler.cut(text, kept))
            while ruler.count(prompt) > budget and kept > 0:  # a token may span the cut
                kept -= 1
                prompt = render(ruler.cut(text, kept))
            cut.append((line, tokens))
        prompts.append(prompt)
    if cut:
        longest = max(cut, key=lambda row: row[1])
        print(
            f"warning: {len(cut)} prompt(s) of {task.data_path} longer than "
            f"task.max_prompt_tokens={budget} were cut to fit (task.long_prompts=truncate); "
            f"the longest, line {longest[0]}, had {longest[1]} tokens",
            flush=True,
        )
    return prompts
