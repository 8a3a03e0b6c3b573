"""A causal classifier's pair scores from the cached key/values of a prefix seen before.

A pair's input is `CLS a SEP b SEP`; in a group of n responses each response is the first
half of up to n - 1 pairs. In a causal (decoder) classifier the keys and values of a token
depend only on the tokens before it, so the cache of `CLS a SEP` is the same in every pair
that starts with `a`: computed once, the other pairs run only their `b SEP` tokens against
it and end with the same last-token hidden state, hence the same P(similar) up to float
rounding. Encoders (BERT, ModernBERT) attend both ways: nothing can be reused there.

`PrefixCache` works as vLLM's automatic prefix caching does, on token ids and without
knowing where SEP is: it keeps the caches of recent inputs, and a new input reuses the
longest prefix it shares with one of them, rounded down to whole blocks (vLLM reuses only
full blocks of 16 tokens), always leaving at least its last token to compute (the pooled
state). A shared prefix may so end inside `b` when two second responses begin alike, or
short of the SEP when the tokenizer merged the SEP with a's last characters; either way
the reused keys are those of the very same tokens at the same positions.
"""

from __future__ import annotations

import copy
import inspect
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch

BLOCK_TOKENS = 16  # vLLM's default --block-size: only whole blocks are reused
CACHED_INPUTS = 64  # recent inputs whose caches are kept (a group has 28 pairs)


def cache_argument(model: torch.nn.Module) -> str | None:
    """The name the base model's forward takes a key/value cache by, or None.

    `past_key_values` up to transformers 5.2x, `cache` since (the output field too)."""
    base = getattr(model, "base_model", None)
    if base is None:
        return None
    params = inspect.signature(base.forward).parameters
    return next((name for name in ("past_key_values", "cache") if name in params), None)


def is_causal_classifier(model: torch.nn.Module) -> bool:
    """A decoder with a `score` head on the last token whose base model takes a cache."""
    score = getattr(model, "score", None)
    return isinstance(score, torch.nn.Linear) and cache_argument(model) is not None


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


class PrefixCache:
    """Logits of token-id inputs, each reusing the longest cached prefix it shares."""

    def __init__(
        self,
        model: torch.nn.Module,
        block_tokens: int = BLOCK_TOKENS,
        capacity: int = CACHED_INPUTS,
    ) -> None:
        if not is_causal_classifier(model):
            raise ValueError("prefix caching needs a causal classifier (a `score` head)")
        self.model = model
        self.cache_name = cache_argument(model)
        self.block_tokens = block_tokens
        self.capacity = capacity
        self.entries: OrderedDict[tuple[int, ...], object] = OrderedDict()
        # vLLM's counters, in tokens: queries = prompt tokens looked up, hits = reused
        self.query_tokens = 0
        self.hit_tokens = 0
        self.hit_inputs = 0

    def _best(self, ids: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        best, key = 0, None
        for cached in self.entries:
            n = shared_prefix(cached, ids)
            if n > best:
                best, key = n, cached
        usable = min(best, len(ids) - 1) // self.block_tokens * self.block_tokens
        return usable, (key if usable > 0 else None)

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        """Logits (num_labels,) of one input, pooled at its last token."""
        return self.logits_and_hit(ids)[0]

    @torch.inference_mode()
    def logits_and_hit(self, ids: Sequence[int]) -> tuple[torch.Tensor, int]:
        """Logits (num_labels,) of one input and how many of its tokens were reused."""
        if not ids:
            raise ValueError("an empty input has no last token to pool")
        usable, key = self._best(ids)
        device = self.model.score.weight.device
        past = None
        if key is not None:
            self.entries.move_to_end(key)
            past = copy.deepcopy(self.entries[key])  # the forward pass extends it in place
            if len(key) > usable:  # a negative count: what every transformers version takes
                past.crop(usable - len(key))
        tokens = torch.tensor([list(ids[usable:])], device=device)
        out = self.model.base_model(input_ids=tokens, use_cache=True, **{self.cache_name: past})
        self.query_tokens += len(ids)
        self.hit_tokens += usable
        self.hit_inputs += usable > 0
        self.entries[tuple(ids)] = getattr(out, self.cache_name)
        self.entries.move_to_end(tuple(ids))
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
        return self.model.score(out.last_hidden_state[0, -1]), usable

    def probs(self, ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """Class probabilities (len(ids), num_labels), inputs in the order given."""
        return torch.stack([torch.softmax(self.logits(seq).float(), dim=-1) for seq in ids])

    def probs_and_hits(self, ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Class probabilities (len(ids), num_labels) and each input's reused tokens."""
        rows, hits = [], []
        for seq in ids:
            logits, hit = self.logits_and_hit(seq)
            rows.append(torch.softmax(logits.float(), dim=-1).cpu().numpy())
            hits.append(hit)
        return np.array(rows, dtype=np.float64), np.array(hits, dtype=np.int64)

    def stats(self) -> dict[str, int]:
        return {
            "prefix_cache_queries": self.query_tokens,
            "prefix_cache_hits": self.hit_tokens,
            "prefix_cache_hit_inputs": self.hit_inputs,
        }
