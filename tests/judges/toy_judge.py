"""A judge kind that exists only for tests: the whole of what adding a judge takes.

One module (this one: its config class, its judge, its registry entry); the test registers
`TOY` and every command takes `darling.judge.kind: toy`, with no other file of the project
touched. The toy calls two responses equivalent when their first `words` words agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from darling_nemo.judges.registry import JudgeKind, StandIn, StandInWorld
from darling_nemo.schema import Strict


class ToyJudgeConfig(Strict):
    kind: Literal["toy"] = "toy"
    threshold: float = 0.5
    words: int = Field(1, ge=1)
    vocabulary: str | None = None  # a folder it "loads" (to show the config check finds it)


class ToyJudge:
    """P(similar) = 1 when the first `words` words agree, else 0; counts the pairs it saw."""

    pairs_seen = 0

    def __init__(self, cfg: ToyJudgeConfig) -> None:
        self.words = cfg.words

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        ToyJudge.pairs_seen += len(pairs)
        return [float(a.split()[: self.words] == b.split()[: self.words]) for a, b in pairs]


def _stand_in(judge: dict[str, Any], world: StandInWorld) -> list[tuple[str, Any]]:
    return [("darling.judge.words", 1)]  # the rehearsal's 16-word responses: judge on one


TOY = JudgeKind(
    ToyJudgeConfig,
    build=ToyJudge,
    model_files=lambda cfg: [("vocabulary", cfg.vocabulary)],
    stand_in=StandIn(overrides=_stand_in),
)
