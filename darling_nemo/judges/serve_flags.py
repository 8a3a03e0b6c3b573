"""The `vllm serve` flags that turn on prefix caching for a causal pair classifier.

Torch-free, so the launchers (`darling-serve-classifiers`, `judges.node_server`) stay light.
"""

from __future__ import annotations

from collections.abc import Sequence

from darling_nemo.plan import resolve_architecture
from darling_nemo.schema import ConfigError

# vLLM 0.10.0 enables prefix caching and chunked prefill for a classify server only with LAST
# pooling (VllmConfig.__post_init__: "Only 'last' pooling supports chunked prefill and prefix
# caching"); its seq-cls adapter pools LAST anyway when none is given, so the flag changes
# no verdict, and Hugging Face's Qwen3ForSequenceClassification pools the last token too.
LAST_POOLING = ["--override-pooler-config", '{"pooling_type":"LAST"}']


def caching_args(model: str, extra_args: Sequence[str]) -> list[str]:
    """The serve flags that make vLLM 0.10.0 cache prefixes for `model`: LAST pooling for a
    causal classifier; nothing for an encoder, an unknown model, or when extra_args already
    set the pooler (the classify contract then checks what they give)."""
    if any(arg.startswith("--override-pooler-config") for arg in extra_args):
        return []
    try:
        encoder = resolve_architecture(model, "model").encoder
    except ConfigError:
        return []
    return [] if encoder else list(LAST_POOLING)
