"""Semantic-equivalence judges behind the core's batched `PairJudge` interface."""

from __future__ import annotations

from darling_nemo.core import PairJudge
from darling_nemo.schema import JudgeConfig


def make_judge(cfg: JudgeConfig) -> PairJudge | None:
    """The judge a config asks for; None for the lexical rules alone (no model)."""
    if cfg.kind == "lexical":
        return None
    raise ValueError(f"unknown judge kind {cfg.kind!r}")
