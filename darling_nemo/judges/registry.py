"""One home per judge kind: what the rest of the package asks about a `darling.judge`.

Each kind (`kind:` of its config) maps to a `JudgeKind`: its config class, its builder, the
model files it names (checked by the config check, replaced by the rehearsal's shrink),
whether its verdicts depend only on the first K words of each response (prefix judging),
whether it calls a pair model at all, its start-up probe, and its stand-in in the rehearsal.
Nothing outside darling_nemo/judges/ names a kind; it asks `judge_kind(cfg)`.

Adding a judge: one module (its config class, a `Strict` model with `kind: Literal[...]`,
and its judge), and one entry in `JUDGES` (or `register_judge_kind` / `registered_judge_kind`
at run time, as the tests do: the verbs every registry shares, darling_nemo/registries.py).
A kind whose judges give a method input (`embed`: methods.base.EMBEDDINGS) says so on its
config class, `gives: ClassVar[frozenset[str]]`; the config check reads it
(`schema.judges.judge_gives`) against what `darling.method` declares.
Registering a kind makes the schema accept it (`schema.judges.use_judge_configs`). Builders
import their heavy dependencies (torch, aiohttp, ray) only when a judge is made.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from darling_nemo.config import check_model_path
from darling_nemo.core import PairJudge
from darling_nemo.judges.ray_pool import RayPoolJudge
from darling_nemo.registries import registered_for_block
from darling_nemo.schema import (
    CrossEncoderJudgeConfig,
    EmbeddingJudgeConfig,
    LexicalJudgeConfig,
    RayPoolJudgeConfig,
    ServedJudgeConfig,
    Strict,
)
from darling_nemo.schema.judges import judge_gives, use_judge_configs

ModelFiles = list[tuple[str, str | None]]  # (key under the judge's own, path or hub name)
Overrides = list[tuple[str, Any]]  # (key path from the config's root, new value)


@dataclass(frozen=True)
class StandInWorld:
    """What the rehearsal made for a judge's stand-in: the tiny pair classifier's folder (a
    kind with a `classifier_template` only), the URL its classifier server listens on, the
    pair token budget of its tiny responses, the Python that runs darling_nemo."""

    classifier_dir: str | None
    judge_url: str | None
    max_length: int
    python: str


def _no_overrides(judge: dict[str, Any], world: StandInWorld) -> Overrides:
    return []


@dataclass(frozen=True)
class StandIn:
    """A judge kind in the rehearsal (CPU, tiny models).

    classifier_template: the pair template (of the validated config) of the tiny pair
        classifier the rehearsal builds for it; None: it needs none.
    overrides: the shrink's changes to the resolved `darling.judge` section (a dict).
    serves: the rehearsal serves the tiny classifier at its judge URL (classify_server).
    """

    classifier_template: Callable[[Any], str] | None = None
    overrides: Callable[[dict[str, Any], StandInWorld], Overrides] = _no_overrides
    serves: bool = False


def _no_files(cfg: Any) -> ModelFiles:
    return []


@dataclass(frozen=True)
class JudgeKind:
    """Everything about one judge kind that code outside darling_nemo/judges/ may ask.

    build: the judge a config asks for; None where the lexical rules alone decide.
    model_files: every model or tokenizer the config names (a path must be a folder here).
    prefix_judging: None when its verdicts read whole responses; else a function saying
        why this config of it cannot take responses before they finish (empty: it reads
        only the first K words of each, `prefix_words` of the judge it builds).
    pair_model: whether a pair model is called (False: the lexical rules alone).
    probe: checks a remote judge answers before a run starts; returns what to print after
        `darling.judge: ` (raises a JudgeError naming the bad key).
    """

    config: type[Strict]
    build: Callable[[Any], PairJudge | None]
    model_files: Callable[[Any], ModelFiles] = _no_files
    prefix_judging: Callable[[Any], list[str]] | None = None
    pair_model: bool = True
    probe: Callable[[Any], str] | None = None
    stand_in: StandIn = field(default_factory=StandIn)

    @property
    def kind(self) -> str:
        return kind_of(self.config)

    @property
    def gives(self) -> frozenset[str]:
        """The method inputs its judges give (declared on its config class, where the config
        check reads them without importing this registry)."""
        return judge_gives(self.config)


def kind_of(config: type[Strict]) -> str:
    """The `kind:` a judge config class is picked by."""
    return str(config.model_fields["kind"].default)


# --------------------------------------------------------------------------------- builders


def _build_cross_encoder(cfg: CrossEncoderJudgeConfig) -> PairJudge:
    from darling_nemo.judges.cross_encoder import CrossEncoderJudge

    return CrossEncoderJudge(cfg)


def _build_embedding(cfg: EmbeddingJudgeConfig) -> PairJudge:
    from darling_nemo.judges.embedding import EmbeddingJudge

    return EmbeddingJudge(cfg)


def _build_served(cfg: ServedJudgeConfig) -> PairJudge:
    from darling_nemo.judges.served import ServedJudge

    fallback = judge_kind(cfg.fallback).build(cfg.fallback) if cfg.fallback is not None else None
    return ServedJudge(cfg, fallback)


def _build_ray_pool(cfg: RayPoolJudgeConfig) -> PairJudge:
    return RayPoolJudge(cfg)


# ------------------------------------------------------------------------------ model files


def _nested(key: str, cfg: Any) -> ModelFiles:
    return [(f"{key}.{sub}", path) for sub, path in judge_kind(cfg).model_files(cfg)]


def _served_files(cfg: ServedJudgeConfig) -> ModelFiles:
    files: ModelFiles = [("tokenizer", cfg.tokenizer)]
    if cfg.launch is not None:
        files.append(("launch.model", cfg.launch.model))
    return files + (_nested("fallback", cfg.fallback) if cfg.fallback is not None else [])


def check_judge_models(judge: Any, key: str = "darling.judge") -> None:
    """Every model or tokenizer a judge config names as a path (a ray pool's classifier and
    a served judge's fallback included) is a folder here (`config.check_model_path`)."""
    for sub, path in judge_kind(judge).model_files(judge):
        check_model_path(path, f"{key}.{sub}")


# ----------------------------------------------------------------------------- prefix judging


def _word_truncation(cfg: CrossEncoderJudgeConfig | ServedJudgeConfig) -> list[str]:
    if cfg.truncation == "words":
        return []
    return [
        f"darling.judge.truncation={cfg.truncation}: a token cut is settled only by the final text"
    ]


def _served_prefix(cfg: ServedJudgeConfig) -> list[str]:
    reasons = _word_truncation(cfg)
    if cfg.fallback is not None:
        reasons.append("darling.judge.fallback judges whole responses when a request fails")
    return reasons


def prefix_fallbacks(judge: Any) -> list[str]:
    """Why this judge cannot take responses before they finish, naming the keys; empty when
    its verdicts depend only on the first K words of each response."""
    entry = judge_kind(judge)
    if entry.prefix_judging is None:
        return [f"darling.judge.kind={entry.kind} reads whole responses"]
    return entry.prefix_judging(judge)


# ------------------------------------------------------------------------------------- probe


def _probe_served(cfg: ServedJudgeConfig) -> str:
    from darling_nemo.judges.served import probe_served_judge

    probe_served_judge(cfg, cfg.probe_timeout_s)
    return f"{len(cfg.endpoints)} endpoint(s) answer"


# --------------------------------------------------------------------------------- stand-ins


def _template(cfg: CrossEncoderJudgeConfig | ServedJudgeConfig) -> str:
    return cfg.template


def _served_stand_in(judge: dict[str, Any], world: StandInWorld) -> Overrides:
    if judge.get("launch") and world.judge_url and world.classifier_dir:
        # the one-node configs: the recipe itself starts the stand-in server on CPU
        out: Overrides = [
            ("darling.judge.launch.model", world.classifier_dir),
            ("darling.judge.launch.port", int(world.judge_url.rsplit(":", 1)[1])),
            ("darling.judge.launch.executable", f"{world.python} -m darling_nemo.classify_server"),
            ("darling.judge.launch.needs_gpu", False),
            # the shrunk judge reads ~8 tokens of a response: blocks of 4, not vLLM's 16, so
            # the stand-in's prefix cache has whole blocks to reuse (as the rehearsal's server)
            (
                "darling.judge.launch.extra_args",
                [*judge["launch"].get("extra_args", []), "--block-size", "4"],
            ),
        ]
    else:
        out = [("darling.judge.endpoints", [world.judge_url])]
    return [*out, ("darling.judge.max_length", world.max_length)]


def _cross_encoder_stand_in(judge: dict[str, Any], world: StandInWorld) -> Overrides:
    return [
        ("darling.judge.model", world.classifier_dir),
        ("darling.judge.max_length", world.max_length),
    ]


def _ray_pool_stand_in(judge: dict[str, Any], world: StandInWorld) -> Overrides:
    return [
        ("darling.judge.classifier.model", world.classifier_dir),
        ("darling.judge.num_gpus_per_actor", 0),
    ]


# ---------------------------------------------------------------------------------- registry

JUDGES: dict[str, JudgeKind] = {
    entry.kind: entry
    for entry in (
        JudgeKind(LexicalJudgeConfig, build=lambda cfg: None, pair_model=False),
        JudgeKind(
            CrossEncoderJudgeConfig,
            build=_build_cross_encoder,
            model_files=lambda cfg: [("model", cfg.model)],
            prefix_judging=_word_truncation,
            stand_in=StandIn(_template, _cross_encoder_stand_in),
        ),
        JudgeKind(
            EmbeddingJudgeConfig,
            build=_build_embedding,
            model_files=lambda cfg: [("model", cfg.model)],
        ),
        JudgeKind(
            ServedJudgeConfig,
            build=_build_served,
            model_files=_served_files,
            prefix_judging=_served_prefix,
            probe=_probe_served,
            stand_in=StandIn(_template, _served_stand_in, serves=True),
        ),
        JudgeKind(
            RayPoolJudgeConfig,
            build=_build_ray_pool,
            model_files=lambda cfg: _nested("classifier", cfg.classifier),
            stand_in=StandIn(lambda cfg: cfg.classifier.template, _ray_pool_stand_in),
        ),
    )
}


def judge_kind_names() -> tuple[str, ...]:
    """Every registered kind, in the order `--judge` and the messages list them."""
    return tuple(JUDGES)


def judge_kind(judge: Any) -> JudgeKind:
    """The entry of a judge config (validated, or its `kind` as text)."""
    kind = judge if isinstance(judge, str) else judge.kind
    try:
        return JUDGES[kind]
    except KeyError:
        raise ValueError(f"unknown judge kind {kind!r} (one of {', '.join(JUDGES)})") from None


def register_judge_kind(entry: JudgeKind) -> None:
    """Add a judge kind; the configs accept it from now on."""
    if entry.kind in JUDGES:
        raise ValueError(f"judge kind {entry.kind!r} is registered already")
    JUDGES[entry.kind] = entry
    use_judge_configs(tuple(e.config for e in JUDGES.values()))


def unregister_judge_kind(kind: str) -> None:
    """Remove a judge kind `register_judge_kind` added; the configs refuse it again."""
    del JUDGES[kind]
    use_judge_configs(tuple(e.config for e in JUDGES.values()))


def registered_judge_kind(entry: JudgeKind) -> AbstractContextManager[JudgeKind]:
    """A judge kind registered for the duration of the block."""
    return registered_for_block(entry, entry.kind, register_judge_kind, unregister_judge_kind)


use_judge_configs(tuple(e.config for e in JUDGES.values()))
