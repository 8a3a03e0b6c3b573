"""NoveltyBench (Zhang et al., 2025): how many genuinely different answers, and how good.

Per prompt: n = 10 generations, partitioned NoveltyBench's way (greedy: each response is
compared with the FIRST member of each existing class only, never with the others), rated 1..10
by a reward model through NoveltyBench's cut-offs, then
    distinct = number of classes
    utility  = sum_i 0.8^i s_i / sum_i 0.8^i, s_i = rating_i if response i opens a new class,
               else 0 (a repeat is worth nothing to a user who has seen its class)
    utility_darling = sum_i s_i / n: the DARLING paper's number (its fork of NoveltyBench,
               evals/novelty-bench/src/score.py, sums the first member's rating of each class
               and divides by n, with no patience weighting; repeats still add nothing)
    quality  = mean rating of all n generations (repeats included; the quality axis of the
               quality-vs-diversity plane)
Summaries are means over prompts. The greedy partition is NOT the training-time union-find
(`core.partition_groups`): with a non-transitive judge the two can differ, and the benchmark
is defined by the greedy one.

Two modes (`mode`, docs/noveltybench-modes.md), the same classifier, threshold, partition
and formulas: `upstream` feeds the classifier each response's first 128 tokens, as the
public leaderboard does (compare `utility`); `darling` its first 512, as the DARLING paper's
fork does (compare `utility_darling`). Every summary records its mode.

Files: generations.jsonl (stage 1), scores.jsonl (stage 2), summary.json.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from darling_nemo.core import PairJudge, short_answer_equivalent
from darling_nemo.evals.generation import (
    Sampler,
    dtype_kwargs,
    generate_to_jsonl,
)
from darling_nemo.evals.math import run_name_of
from darling_nemo.evals.records import (
    JsonlWriter,
    check_resume,
    latest_records,
    load_prompts,
    write_json,
)
from darling_nemo.evals.run_source import source_of
from darling_nemo.evals.schema import (
    NOVELTYBENCH_CLASSIFIER,
    NOVELTYBENCH_SIDE_TOKENS,
    NOVELTYBENCH_THRESHOLD,
    NOVELTYBENCH_TOKENIZER,
    SKYWORK_GEMMA2_27B_THRESHOLDS,
    NoveltyBenchConfig,
    NoveltyBenchMode,
    RewardModelConfig,
    is_noveltybench_classifier,
)
from darling_nemo.judges.registry import judge_kind
from darling_nemo.schema import (
    ConfigError,
    CrossEncoderJudgeConfig,
    EmbeddingJudgeConfig,
    JudgeConfig,
)
from darling_nemo.tasks.judge import configured_judge

MODE_NOTES: dict[str, str] = {
    "upstream": (
        "mode upstream: NoveltyBench as its public leaderboard runs it (each response's "
        "first 128 tokens in the classifier's input); compare `utility` with the leaderboard"
    ),
    "darling": (
        "mode darling: the DARLING paper's NoveltyBench fork (each response's first 512 "
        "tokens in the classifier's input); compare `utility_darling` with the paper"
    ),
}

# ---------------------------------------------------------------------------------------------
# Partition, ratings, utility (pure)
# ---------------------------------------------------------------------------------------------


def greedy_partition_groups(
    groups: Sequence[Sequence[str]], judge: PairJudge | None, threshold: float
) -> list[list[int]]:
    """NoveltyBench's greedy partition of many groups, class ids in order of first member.

    For each group, in order: the first unassigned response opens a class; every later
    unassigned response joins it if it is equivalent to that class's FIRST member. A pair is
    decided by the short-answer rule (both <= 5 words) when it applies, else by
    judge(pair) > threshold. judge=None: only identical texts are equivalent beyond the rule.

    Batching: one class of each group is opened per round, and all of that round's pairs
    (opener, candidate) go to the judge in a single call, so a group of n costs at most n
    rounds and the judge sees large batches. The result equals the sequential procedure,
    because within a round each decision only depends on the opener and one candidate.
    """
    class_ids = [[-1] * len(g) for g in groups]
    opened = [0] * len(groups)  # classes opened so far, per group
    while True:
        wave: list[tuple[int, int, int]] = []  # (group, opener, candidate)
        for g, responses in enumerate(groups):
            ids = class_ids[g]
            opener = next((i for i, c in enumerate(ids) if c < 0), None)
            if opener is None:
                continue
            ids[opener] = opened[g]
            opened[g] += 1
            for j in range(opener + 1, len(responses)):
                if ids[j] >= 0:
                    continue
                rule = short_answer_equivalent(responses[opener], responses[j])
                if rule is None and judge is None:
                    rule = responses[opener] == responses[j]
                if rule is None:
                    wave.append((g, opener, j))
                elif rule:
                    ids[j] = ids[opener]
        if not wave and all(c >= 0 for ids in class_ids for c in ids):
            return class_ids
        if wave:
            assert judge is not None
            probs = list(judge([(groups[g][i], groups[g][j]) for g, i, j in wave]))
            if len(probs) != len(wave):
                raise ValueError(f"judge returned {len(probs)} scores for {len(wave)} pairs")
            for (g, i, j), p in zip(wave, probs, strict=True):
                if float(p) > threshold:
                    class_ids[g][j] = class_ids[g][i]


def rating_from_reward(reward: float, thresholds: Sequence[float]) -> int:
    """1..10: one more than the number of cut-offs strictly below the reward (NoveltyBench)."""
    return bisect.bisect_left(list(thresholds), reward) + 1


def novelty_scores(
    ratings: Sequence[int], class_ids: Sequence[int], patience: float
) -> dict[str, Any]:
    """distinct, utility and quality of one prompt's generations (in generation order)."""
    seen: set[int] = set()
    generation_scores = []
    for rating, cls in zip(ratings, class_ids, strict=True):
        generation_scores.append(rating if cls not in seen else 0)
        seen.add(cls)
    weights = patience ** np.arange(len(ratings))
    return {
        "distinct": len(seen),
        "generation_scores": generation_scores,
        "utility": float(np.dot(weights, generation_scores) / weights.sum()),
        "utility_darling": float(np.sum(generation_scores) / len(ratings)),
        "quality": float(np.mean(ratings)),
    }


def _is_cross_encoder(cfg: JudgeConfig) -> bool:
    """A Hugging Face pair classifier in this process: the one kind NoveltyBench's own
    pair input (token ids, segment ids) can feed."""
    return isinstance(cfg, CrossEncoderJudgeConfig)


def _is_embedding(cfg: JudgeConfig) -> bool:
    return isinstance(cfg, EmbeddingJudgeConfig)


def describe_judge(
    cfg: JudgeConfig,
    pair_input: Literal["noveltybench", "judge_template"],
    mode: NoveltyBenchMode,
) -> dict[str, Any]:
    """Which judge partitioned the generations, and whether it is NoveltyBench's own (for
    the mode): its DeBERTa classifier, at 0.102, fed NoveltyBench's token-level pair input
    with each response cut to the mode's tokens."""
    side_tokens = NOVELTYBENCH_SIDE_TOKENS[mode]
    model = getattr(cfg, "model", None)
    embedding, cross_encoder = _is_embedding(cfg), _is_cross_encoder(cfg)
    if embedding and model is None:
        model = "all-MiniLM-L6-v2 (shipped)"
    reference_model = cross_encoder and is_noveltybench_classifier(model)
    reference_threshold = cfg.threshold == NOVELTYBENCH_THRESHOLD
    is_reference = reference_model and reference_threshold and pair_input == "noveltybench"
    head = f" ({cfg.head} head)" if embedding else ""
    description = cfg.kind + (f" {model}" if model else "") + head + f" > {cfg.threshold:g}"
    if not judge_kind(cfg).pair_model:
        description = "lexical rules only (identical or short-answer match)"
    if is_reference:
        note = (
            "NoveltyBench's DeBERTa classifier at 0.102 with partition.py's pair input "
            f"([CLS] a [SEP] b [SEP], each side cut to {side_tokens} tokens ({mode} mode), "
            "segment ids 0/1); batched with padding, so scores match up to float rounding"
        )
    elif reference_model and reference_threshold:
        note = (
            "NoveltyBench's classifier at 0.102, but fed the judge's text template "
            "(pair_input=judge_template), not NoveltyBench's token-level pair input: "
            "distinct may differ from published numbers"
        )
    else:
        note = (
            f"stand-in for NoveltyBench's {NOVELTYBENCH_CLASSIFIER} at "
            f"{NOVELTYBENCH_THRESHOLD}: distinct is not comparable with published numbers"
        )
    noveltybench_input = cross_encoder and pair_input == "noveltybench"
    return {
        "kind": cfg.kind,
        "model": model,
        "threshold": cfg.threshold,
        "pair_input": pair_input if cross_encoder else None,
        "side_tokens": side_tokens if noveltybench_input else None,
        "description": description,
        "is_reference": is_reference,
        "note": note,
    }


class NoveltyBenchPairJudge:
    """PairJudge: a sequence-classification checkpoint fed NoveltyBench's pair input.

    As partition.py's classifier_score: ids = [CLS] + a + [SEP] + b + [SEP], each response
    tokenized without special tokens and cut to its first `side_tokens` tokens (128 upstream,
    512 in the DARLING fork); token_type_ids 0 up to
    and including the first [SEP], 1 after (sent only if the tokenizer uses them; DeBERTa-v3
    checkpoints with type_vocab_size 0 ignore them anyway); P(similar) = softmax(logits)[1].
    partition.py scores one pair at a time; here pairs sorted by length are batched with
    padding and an attention mask, which gives the same scores up to float rounding.
    """

    def __init__(
        self, judge: CrossEncoderJudgeConfig, tokenizer: str | None, side_tokens: int
    ) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from darling_nemo.judges.cross_encoder import resolve_device, resolve_dtype

        name = tokenizer or judge.model
        hint = (
            "; NoveltyBench's classifier ships no tokenizer: set "
            f"pair_tokenizer={NOVELTYBENCH_TOKENIZER} (what partition.py loads)"
            if tokenizer is None
            else ""
        )
        model = AutoModelForSequenceClassification.from_pretrained(judge.model)
        if model.config.num_labels < 2:
            raise ConfigError(f"judge.model {judge.model!r} has fewer than 2 labels")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot load the judge's tokenizer {name!r}: {err}{hint}") from None
        # transformers 5 builds an EMPTY tokenizer from a folder without tokenizer files
        # instead of failing: a vocabulary far smaller than the model's is that case.
        if not 0.5 * model.config.vocab_size <= len(self.tokenizer) <= model.config.vocab_size:
            raise ConfigError(
                f"the tokenizer of {name!r} has {len(self.tokenizer)} tokens but the judge "
                f"model's vocabulary has {model.config.vocab_size}: wrong or missing "
                f"tokenizer{hint}"
            )
        if self.tokenizer.cls_token_id is None or self.tokenizer.sep_token_id is None:
            raise ConfigError(
                f"tokenizer {name!r} has no [CLS]/[SEP] tokens: pair_input=noveltybench needs "
                "an encoder tokenizer (or use pair_input=judge_template)"
            )
        self.tokenizer.padding_side = "right"  # as the encoder was trained
        self.batch_size = judge.batch_size
        self.device = resolve_device(judge.device)
        self.model = model.to(self.device, resolve_dtype(judge.dtype, self.device)).eval()
        self.uses_token_types = "token_type_ids" in self.tokenizer.model_input_names
        self.side_tokens = side_tokens

    def encode(self, a: str, b: str) -> dict[str, list[int]]:
        """partition.py's input for one pair."""
        ids = [self.tokenizer.cls_token_id]
        for text in (a, b):
            ids += self.tokenizer.encode(
                text,
                add_special_tokens=False,
                truncation=True,
                max_length=self.side_tokens,
            )
            ids.append(self.tokenizer.sep_token_id)
        first_segment = ids.index(self.tokenizer.sep_token_id) + 1
        encoded = {"input_ids": ids}
        if self.uses_token_types:
            encoded["token_type_ids"] = [0] * first_segment + [1] * (len(ids) - first_segment)
        return encoded

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        encoded = [self.encode(a, b) for a, b in pairs]
        order = sorted(range(len(encoded)), key=lambda k: len(encoded[k]["input_ids"]))
        probs = [0.0] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = self.tokenizer.pad(
                [encoded[k] for k in rows], padding=True, return_tensors="pt"
            )
            with torch.inference_mode():
                logits = self.model(**{k: v.to(self.device) for k, v in batch.items()}).logits
            similar = torch.softmax(logits.float(), dim=-1)[:, 1].tolist()
            for k, p in zip(rows, similar, strict=True):
                probs[k] = p
        return probs


def make_noveltybench_judge(cfg: NoveltyBenchConfig) -> PairJudge | None:
    """The partition judge: a cross_encoder gets NoveltyBench's pair input unless
    pair_input=judge_template; every other kind is made as in training
    (`tasks.judge.configured_judge`, what `run_judge` makes of darling.judge)."""
    if _is_cross_encoder(cfg.judge) and cfg.pair_input == "noveltybench":
        return NoveltyBenchPairJudge(cfg.judge, cfg.pair_tokenizer_name(), cfg.side_tokens)
    return configured_judge(cfg.judge)


# ---------------------------------------------------------------------------------------------
# Reward model
# ---------------------------------------------------------------------------------------------


class RewardModel:
    """A scalar (num_labels=1) sequence-classification reward model over chat transcripts."""

    def __init__(self, cfg: RewardModelConfig) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.cfg = cfg
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        extra = {"device_map": cfg.device_map} if cfg.device_map else {}
        self.model = AutoModelForSequenceClassification.from_pretrained(
            cfg.model, num_labels=1, **dtype_kwargs(cfg.dtype), **extra
        )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        if not cfg.device_map:
            self.model.to("cuda" if torch.cuda.is_available() else "cpu")
        self.model.eval()

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        import torch

        texts = [
            self.tokenizer.apply_chat_template(
                [{"role": "user", "content": p}, {"role": "assistant", "content": r}],
                tokenize=False,
            )
            for p, r in zip(prompts, responses, strict=True)
        ]
        scores: list[float] = []
        for start in range(0, len(texts), self.cfg.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.cfg.batch_size],
                padding=True,
                truncation=True,
                max_length=self.cfg.max_length,
                add_special_tokens=False,  # the chat template wrote them
                return_tensors="pt",
            ).to(self.model.device)
            with torch.no_grad():
                scores.extend(self.model(**batch).logits[:, 0].float().tolist())
        return scores


# ---------------------------------------------------------------------------------------------
# The whole evaluation
# ---------------------------------------------------------------------------------------------


def summarize_noveltybench(
    scored: Sequence[dict[str, Any]], prompts_total: int, meta: dict[str, Any]
) -> dict[str, Any]:
    def stat(key: str) -> tuple[float, float]:
        values = [r[key] for r in scored]
        return (float(np.mean(values)), float(np.var(values))) if values else (0.0, 0.0)

    (d, dv), (u, uv), (q, qv) = stat("distinct"), stat("utility"), stat("quality")
    ud, udv = stat("utility_darling")
    return {
        "eval": "noveltybench",
        **meta,
        "prompts_done": len(scored),
        "prompts_total": prompts_total,
        "complete": len(scored) == prompts_total,
        "mean_distinct": d,
        "var_distinct": dv,
        "mean_utility": u,
        "var_utility": uv,
        "mean_utility_darling": ud,
        "var_utility_darling": udv,
        "utility_note": (
            "utility: NoveltyBench's (patience-weighted mean, repeats 0). utility_darling: "
            "what the DARLING paper reports (its NoveltyBench fork): sum of each class's first "
            "rating / n, no patience weighting. Compare with the paper using utility_darling."
        ),
        "mean_quality": q,
        "var_quality": qv,
    }


def run_noveltybench(
    cfg: NoveltyBenchConfig,
    sampler: Sampler | None = None,
    judge: PairJudge | None = None,
    reward_model: RewardModel | None = None,
) -> dict[str, Any] | None:
    """Stage 1 generates, stage 2 partitions and rates; each resumes from its JSONL.

    Returns the summary, or None after a generate-only stage.
    """
    out = Path(cfg.output_dir)
    prompts = load_prompts(cfg.prompts, cfg.prompt_key, cfg.id_key, cfg.max_prompts)
    gen_path, score_path = out / "generations.jsonl", out / "scores.jsonl"

    # Stage 1: generations.
    generated = latest_records(gen_path, "id")
    if cfg.stage in ("all", "generate"):
        generated = generate_to_jsonl(
            cfg.generator,
            cfg.prompt,
            cfg.sampling,
            prompts,
            gen_path,
            "noveltybench-generate",
            sampler,
        )
        if cfg.stage == "generate":
            return None

    # Stage 2: partition and rate.
    missing = [p["id"] for p in prompts if p["id"] not in generated]
    if missing:
        raise ConfigError(
            f"{gen_path}: {len(missing)} prompts have no generations yet (first: {missing[0]}); "
            "run stage=generate first"
        )
    judge_info = describe_judge(cfg.judge, cfg.pair_input, cfg.mode)
    check_score_resume(cfg, out)
    scored = latest_records(score_path, "id")
    for record in scored.values():  # scores written before utility_darling was recorded
        if "utility_darling" not in record:
            record.update(novelty_scores(record["ratings"], record["partition"], cfg.patience))
    pending = [generated[p["id"]] for p in prompts if p["id"] not in scored]
    print(f"noveltybench: {len(prompts) - len(pending)} of {len(prompts)} prompts scored")
    if pending:
        judge = judge if judge is not None else make_noveltybench_judge(cfg)
        reward_model = reward_model or RewardModel(cfg.reward_model)
        score_pending(cfg, pending, judge, reward_model, score_path, scored)

    summary = summarize_noveltybench(
        [scored[p["id"]] for p in prompts if p["id"] in scored],
        len(prompts),
        {
            "mode": cfg.mode,
            "mode_note": MODE_NOTES[cfg.mode],
            "run_name": run_name_of(cfg.run_name, cfg.generator.model),
            "model": cfg.generator.model,
            "source": source_of(cfg),  # run, step and training config (run=...)
            "n": cfg.sampling.n,
            "sampling": cfg.sampling.model_dump(),
            "prompts_file": cfg.prompts,
            "judge": judge_info,
            "reward_model": {
                "model": cfg.reward_model.model,
                "noveltybench_thresholds": list(cfg.reward_model.thresholds)
                == list(SKYWORK_GEMMA2_27B_THRESHOLDS),
            },
            "patience": cfg.patience,
        },
    )
    write_json(out / "summary.json", summary)
    return summary


def check_score_resume(cfg: NoveltyBenchConfig, out: Path) -> None:
    """Refuses to add scores to an output_dir scored with other judge or rating settings."""
    pair_settings = (  # only a cross_encoder reads them (older output_dirs lack the keys)
        {"pair_input": cfg.pair_input, "pair_tokenizer": cfg.pair_tokenizer_name()}
        if _is_cross_encoder(cfg.judge)
        else {}
    )
    if _is_cross_encoder(cfg.judge) and cfg.pair_input == "noveltybench":
        # the mode's truncation changes the partition (an output_dir scored before modes
        # existed was scored at 512 tokens: it reads <unset> here and is refused)
        pair_settings["side_tokens"] = cfg.side_tokens
    check_resume(
        out,
        "noveltybench-score",
        {
            "judge": cfg.judge.model_dump(),
            **pair_settings,
            "reward_model": cfg.reward_model.model_dump(exclude={"batch_size", "device_map"}),
            "patience": cfg.patience,
        },
    )


def score_pending(
    cfg: NoveltyBenchConfig,
    pending: list[dict[str, Any]],
    judge: PairJudge,
    reward_model: RewardModel,
    score_path: Path,
    scored: dict[str, dict[str, Any]],
) -> None:
    """Partitions and rates `pending` chunk by chunk, appending each record to score_path
    (and to `scored`) as soon as its chunk is done."""
    with (
        JsonlWriter(score_path) as writer,
        tqdm(total=len(pending), desc="noveltybench score", unit="prompt") as progress,
    ):
        for start in range(0, len(pending), cfg.chunk_prompts):
            chunk = pending[start : start + cfg.chunk_prompts]
            partitions = greedy_partition_groups(
                [r["generations"] for r in chunk], judge, cfg.judge.threshold
            )
            rewards = reward_model.score(
                [r["prompt"] for r in chunk for _ in r["generations"]],
                [g for r in chunk for g in r["generations"]],
            )
            offset = 0
            for record, class_ids in zip(chunk, partitions, strict=True):
                raw = rewards[offset : offset + len(class_ids)]
                offset += len(class_ids)
                ratings = [rating_from_reward(x, cfg.reward_model.thresholds) for x in raw]
                result = {
                    "id": record["id"],
                    "prompt": record["prompt"],
                    "generations": record["generations"],
                    "partition": class_ids,
                    "raw_rewards": raw,
                    "ratings": ratings,
                    **novelty_scores(ratings, class_ids, cfg.patience),
                }
                writer.write(result)
                scored[record["id"]] = result
            progress.update(len(chunk))
