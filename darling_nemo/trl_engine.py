"""The single-node engine: DARLING on TRL's GRPOTrainer (one process: a laptop, one GPU).

How DARLING enters TRL. TRL sums its reward functions (with `reward_weights`) and turns
the sum into advantages itself: A = r - mean_group(r), divided by the group std unless
`scale_rewards="none"`. `DarlingReward` is the one reward function TRL sees. It calls the
user's quality reward function(s) the way TRL would (same keyword arguments, weighted sum,
None skipped), groups the batch by prompt, runs `core.darling_batch` and returns the
core's ADVANTAGE. Each group's advantages already have mean 0 (under either baseline, with
or without std normalisation), so with `scale_rewards="none"` TRL's own baseline
subtraction leaves them unchanged: the advantage the policy sees is exactly the core's,
for every `darling:` setting, and the DARLING math lives only in core.py. (Handing TRL the
fused reward q * Norm(d) instead gives the same result only for the default mean baseline
without std normalisation.) Consequently TRL's own `reward` log column is ~0; the real
quantities are logged as `darling/*` (`metrics.darling_step_metrics`, the names NeMo-RL
runs log too).

Loss: `loss_type: bnpo` averages the per-token loss over all tokens of a micro-batch and
divides by the gradient-accumulation steps, which is verl's "token-mean" as the reference
runs it; `dapo` normalises by the tokens of the whole rollout batch (identical when one
micro-batch is the whole batch). TRL's "grpo" (mean per sequence, then over sequences)
and "dr_grpo" are not token-mean and are refused.

    from darling_nemo.trl_engine import run
    metrics = run(load_config("conf/local/math_trl.yaml"))
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from darling_nemo.config import save_config
from darling_nemo.core import DarlingBatch, PairJudge, darling_batch
from darling_nemo.jsonl import read_jsonl
from darling_nemo.metrics import (
    TimedJudge,
    darling_step_metrics,
    judge_usage,
    usage_since,
)
from darling_nemo.mini.task import DigitSum, multiset_judge, prompt_text
from darling_nemo.schema import (
    ChatTaskConfig,
    ConfigError,
    DarlingConfig,
    DigitSumTaskConfig,
    LengthStandInQualityConfig,
    MathTaskConfig,
    RewardModelQualityConfig,
    TrlRunConfig,
    validate_section,
)

if TYPE_CHECKING:  # torch-free at import: a dry run validates a config without torch
    from darling_nemo.mini.evaluate import QualityFn

TOKEN_LEVEL_LOSSES = ("bnpo", "dapo")


# ---------------------------------------------------------------------------------------------
# The adapter: quality reward functions -> DARLING advantages, as one TRL reward function
# ---------------------------------------------------------------------------------------------


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The text of a TRL completion (or prompt): a string, or a conversational list of
    messages (TRL's completions then are [{"role": "assistant", "content": text}]); content
    given as parts ([{"type": "text", "text": ...}]) contributes its text parts."""
    if isinstance(completion, str):
        return completion
    texts = []
    for message in completion:
        content = message.get("content") or ""
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(str(part.get("text", "")) for part in content)
    return "".join(texts)


def conversational(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose "prompt" is one user message, so TRL renders the policy's chat template."""
    return [{**row, "prompt": [{"role": "user", "content": row["prompt"]}]} for row in rows]


class DarlingReward:
    """A TRL reward function `(prompts, completions, **kwargs) -> list[float]` for DARLING.

    quality_funcs: TRL reward functions measuring quality alone (e.g. a verifier); they
    receive every keyword argument TRL passes (dataset columns, completion_ids, ...).
    darling: the validated `darling:` section. group_size: TRL's `num_generations`.
    judge: the pair judge, usually `judges.make_judge(darling.judge)` (None: lexical rules
    only). weights: like TRL's `reward_weights`; quality = sum_k w_k * q_k over the
    functions that did not return None.

    Rows come from TRL as `group_size` consecutive completions of one prompt; the adapter
    checks that every block has one prompt and uses the block index as the group id (so two
    groups of the same prompt text in one batch stay two groups, as TRL's baseline treats
    them).

        judge = make_judge(darling_cfg.judge)
        reward = DarlingReward(my_verifier, darling_cfg, group_size=8, judge=judge)
        trainer = GRPOTrainer(model, reward_funcs=[reward], args=GRPOConfig(
            num_generations=8, scale_rewards="none", loss_type="bnpo", ...), ...)
        reward.check_trainer_args(trainer.args, trainer.reward_funcs)
    """

    __name__ = "darling"  # TRL logs reward functions by name

    def __init__(
        self,
        quality_funcs: Callable[..., Sequence[float | None]]
        | Sequence[Callable[..., Sequence[float | None]]],
        darling: DarlingConfig,
        group_size: int,
        *,
        judge: PairJudge | None,
        weights: Sequence[float] | None = None,
    ) -> None:
        self.quality_funcs = (
            list(quality_funcs) if isinstance(quality_funcs, Sequence) else [quality_funcs]
        )
        if not self.quality_funcs:
            raise ValueError("DarlingReward needs at least one quality reward function")
        self.weights = [1.0] * len(self.quality_funcs) if weights is None else list(weights)
        if len(self.weights) != len(self.quality_funcs):
            raise ValueError(
                f"{len(self.weights)} weights for {len(self.quality_funcs)} quality functions"
            )
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {group_size}")
        self.darling = darling
        self.settings = darling.settings()
        self.group_size = group_size
        self.judge = TimedJudge(judge) if judge is not None else None
        self.last_batch: DarlingBatch | None = None
        self.last_metrics: dict[str, float] = {}
        self._warned_no_log_metric = False

    def quality(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> np.ndarray:
        """Weighted sum of the quality functions, None skipped (TRL's nansum)."""
        total = np.zeros(len(completions))
        scored = np.zeros(len(completions), dtype=bool)
        for func, weight in zip(self.quality_funcs, self.weights, strict=True):
            values = list(func(prompts=prompts, completions=completions, **kwargs))
            name = getattr(func, "__name__", type(func).__name__)
            if len(values) != len(completions):
                raise ValueError(
                    f"quality function {name} returned {len(values)} values for "
                    f"{len(completions)} completions"
                )
            for i, value in enumerate(values):
                if value is None:
                    continue
                if not math.isfinite(float(value)):
                    raise ValueError(f"quality function {name} returned {value} for completion {i}")
                total[i] += weight * float(value)
                scored[i] = True
        if not scored.all():
            row = int(np.flatnonzero(~scored)[0])
            raise ValueError(
                f"every quality function returned None for completion {row}: DARLING needs a "
                "quality for every response of a group"
            )
        return total

    def group_ids(self, prompts: Sequence[Any]) -> list[Hashable]:
        """Block index of each row; every block of `group_size` rows must share its prompt."""
        if len(prompts) % self.group_size:
            raise ValueError(
                f"{len(prompts)} completions is not a multiple of group_size={self.group_size}: "
                "each process must see whole groups (run the TRL engine on one process)"
            )
        for start in range(0, len(prompts), self.group_size):
            block = prompts[start : start + self.group_size]
            if any(p != block[0] for p in block):
                raise ValueError(
                    f"rows {start}..{start + self.group_size - 1} mix prompts: TRL must lay out "
                    f"num_generations={self.group_size} consecutive completions per prompt"
                )
        return [row // self.group_size for row in range(len(prompts))]

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float]:
        quality = self.quality(prompts, completions, **kwargs)
        started = time.perf_counter()
        judge_before = judge_usage(self.judge)
        texts = [completion_text(c) for c in completions]
        group_ids = self.group_ids(prompts)
        batch = darling_batch(texts, quality, group_ids, self.judge, self.settings)
        step_metrics = darling_step_metrics(
            [(batch, group_ids)],
            semantic=self.settings.diversity == "semantic",
            seconds=time.perf_counter() - started,
            judge=usage_since(judge_before, judge_usage(self.judge)),
        )
        metrics = {f"darling/{name}": value for name, value in step_metrics.items()}
        self.last_batch, self.last_metrics = batch, metrics
        log_metric = kwargs.get("log_metric")  # recent TRL (1.16 does) passes it
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(name, value)
        elif "trainer_state" in kwargs and not self._warned_no_log_metric:
            self._warned_no_log_metric = True
            warnings.warn(
                "this TRL does not pass `log_metric` to reward functions: the darling/* "
                "metrics are not logged (they stay in DarlingReward.last_metrics); TRL 1.16 "
                "passes it",
                stacklevel=2,
            )
        return batch.advantage.tolist()

    def check_trainer_args(self, args: Any, reward_funcs: Sequence[Any] | None = None) -> None:
        """Refuse TRL settings that would change DARLING's advantage; name the keys.

        `args` is a trl.GRPOConfig; `reward_funcs` the list the GRPOTrainer was given.
        """
        problems = []
        if str(args.scale_rewards).lower() not in ("none", "false"):
            problems.append(
                f"GRPOConfig.scale_rewards={args.scale_rewards!r} would divide the advantages "
                "by a std again; set scale_rewards='none' (std normalisation is "
                f"darling.normalize_std, now {self.darling.normalize_std})"
            )
        if args.multi_objective_aggregation != "sum_then_normalize":
            problems.append(
                f"GRPOConfig.multi_objective_aggregation={args.multi_objective_aggregation!r} "
                "re-normalises the rewards; use 'sum_then_normalize'"
            )
        if args.loss_type not in TOKEN_LEVEL_LOSSES:
            problems.append(
                f"GRPOConfig.loss_type={args.loss_type!r} is not token-level; use one of "
                f"{TOKEN_LEVEL_LOSSES} (the reference aggregates by token-mean)"
            )
        if args.num_generations != self.group_size:
            problems.append(
                f"GRPOConfig.num_generations={args.num_generations} but the DARLING adapter "
                f"groups by group_size={self.group_size}"
            )
        if args.world_size != 1:
            problems.append(
                f"world_size={args.world_size}: TRL scores each process's rows separately, so a "
                "group may be split; run the TRL engine on one process (NeMo-RL for more)"
            )
        if reward_funcs is not None and (len(reward_funcs) != 1 or reward_funcs[0] is not self):
            problems.append(
                "reward_funcs must be [this DarlingReward] alone: other reward functions would "
                "be added to DARLING's advantage; pass them to DarlingReward as quality_funcs"
            )
        weights = getattr(args, "reward_weights", None)
        if weights is not None and list(weights) != [1.0]:
            problems.append(
                f"GRPOConfig.reward_weights={weights}: weight the quality functions in "
                "DarlingReward(weights=...) instead"
            )
        if problems:
            raise ValueError("TRL settings contradict DARLING:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------------------------
# Quality functions and tasks
# ---------------------------------------------------------------------------------------------


def digit_sum_quality(task: DigitSum) -> QualityFn:
    """1.0 for an answer of the right length, digits and total, else 0.0."""

    def digit_sum_correct(
        prompts: Sequence[str], completions: Sequence[Any], **_: Any
    ) -> list[float]:
        return [
            float(task.is_correct(completion_text(p), completion_text(c)))
            for p, c in zip(prompts, completions, strict=True)
        ]

    return digit_sum_correct


def math_verify_quality(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], **_: Any
) -> list[float]:
    """1.0 if math-verify finds the reference answer in the completion (boxed or last), else 0.0."""
    from math_verify import parse, verify

    scores = []
    for completion, reference in zip(completions, answer, strict=True):
        gold = parse(f"${reference}$")
        try:
            scores.append(float(verify(gold, parse(completion_text(completion)))))
        except Exception:  # math-verify raises on malformed LaTeX or a timeout: not correct
            scores.append(0.0)
    return scores


def length_stand_in_quality(target_words: int) -> QualityFn:
    """STAND-IN, not a quality measure: min(words, target) / target. Smoke runs only."""

    def length_stand_in(
        prompts: Sequence[Any], completions: Sequence[Any], **_: Any
    ) -> list[float]:
        return [
            min(len(completion_text(c).split()), target_words) / target_words for c in completions
        ]

    return length_stand_in


class RewardModelQuality:
    """Scores (prompt, response) with a sequence-classification reward model (logit 0).

    The pair is rendered with the reward model's chat template when it has one (user turn,
    assistant turn), else as prompt + response, like TRL does for reward models.
    """

    __name__ = "reward_model"

    def __init__(self, cfg: RewardModelQualityConfig) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.name_or_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            cfg.name_or_path, num_labels=1
        ).to(self.device)
        self.model.eval()
        self.cfg = cfg

    def render(self, prompt: Any, completion: Any) -> str:
        """The reward model's input: the conversation in its chat template, if it has one."""
        response = completion_text(completion)
        if self.tokenizer.chat_template:
            messages = (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            )
            messages.append({"role": "assistant", "content": response})
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return completion_text(prompt) + response

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        import torch

        texts = [self.render(p, c) for p, c in zip(prompts, completions, strict=True)]
        scores: list[float] = []
        for start in range(0, len(texts), self.cfg.batch_size):
            encoded = self.tokenizer(
                texts[start : start + self.cfg.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.cfg.max_length,
                add_special_tokens=not self.tokenizer.chat_template,
            ).to(self.device)
            with torch.inference_mode():
                scores.extend(self.model(**encoded).logits[:, 0].float().tolist())
        return scores


def column(rows: Sequence[Mapping[str, Any]], key: str, path: str, config_key: str) -> list[Any]:
    """rows[i][key] for every row; a missing key names the file, line and config key."""
    values = []
    for number, row in enumerate(rows, start=1):
        if key not in row:
            raise ValueError(
                f"{path}: row {number} has no {key!r} (set {config_key} to one of {sorted(row)})"
            )
        values.append(row[key])
    return values


def task_rows(task: MathTaskConfig | ChatTaskConfig) -> list[dict[str, Any]]:
    """The first `max_prompts` rows of task.data_path; a missing or malformed file is a
    ConfigError naming the key and every bad line."""
    try:
        return read_jsonl(task.data_path)[: task.max_prompts]
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"task.data_path: {err}") from None


@dataclass
class Task:
    """What a run trains on: prompts (dicts with "prompt" and extra columns), quality, judge."""

    train_rows: list[dict[str, Any]]
    heldout_rows: list[dict[str, Any]]
    quality: QualityFn
    judge: PairJudge | None
    word_vocabulary: list[str] | None  # tiny policies: a word tokenizer over these; None: chars


def build_task(cfg: TrlRunConfig) -> Task:
    """The task a config names, with its quality function and pair judge."""
    task = cfg.task
    if isinstance(task, DigitSumTaskConfig):  # (the schema refuses another judge here)
        digit_sum = digit_sum_task(task)
        targets = digit_sum_targets(task)
        return Task(
            train_rows=[{"prompt": prompt_text(t)} for t in targets["train"]],
            heldout_rows=[{"prompt": prompt_text(t)} for t in targets["heldout"]],
            quality=digit_sum_quality(digit_sum),
            judge=multiset_judge,
            word_vocabulary=digit_sum.vocabulary(),
        )

    from darling_nemo.judges import make_judge

    judge = make_judge(cfg.darling.judge)
    if isinstance(task, MathTaskConfig):
        raw = task_rows(task)
        questions = column(raw, task.question_key, task.data_path, "task.question_key")
        answers = column(raw, task.answer_key, task.data_path, "task.answer_key")
        rows = [
            {"prompt": task.prompt_template.format(question=q), "answer": str(a)}
            for q, a in zip(questions, answers, strict=True)
        ]
        split = len(rows) - task.heldout_prompts
        if split < 1:
            raise ValueError(
                f"task.heldout_prompts={task.heldout_prompts} leaves no training prompts "
                f"({len(rows)} rows in {task.data_path})"
            )
        return Task(rows[:split], rows[split:], math_verify_quality, judge, None)

    assert isinstance(task, ChatTaskConfig)
    raw = task_rows(task)
    rows = [{"prompt": p} for p in column(raw, task.prompt_key, task.data_path, "task.prompt_key")]
    if isinstance(task.quality, LengthStandInQualityConfig):
        quality: QualityFn = length_stand_in_quality(task.quality.target_words)
    else:
        quality = RewardModelQuality(task.quality)
    return Task(rows, [], quality, judge, None)


def digit_sum_task(task: DigitSumTaskConfig) -> DigitSum:
    return DigitSum(task.length, task.min_digit, task.max_digit)


def digit_sum_targets(task: DigitSumTaskConfig) -> dict[str, list[int]]:
    """Training and held-out target sums: every `heldout_every`-th target from min+1 is held out."""
    targets = range(task.min_target, task.max_target + 1)
    heldout = [t for t in targets if (t - task.min_target - 1) % task.heldout_every == 0]
    return {"train": [t for t in targets if t not in heldout], "heldout": heldout}


# ---------------------------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------------------------


def build_policy(cfg: TrlRunConfig, task: Task, output_dir: Path) -> tuple[Any, Any]:
    """(model, tokenizer), always loaded with `from_pretrained`.

    A tiny policy is built once (task tokenizer, small Llama, seeded) and saved to
    `output_dir/initial_policy`, so a resumed run, TRL's reference model (kl_coef > 0) and
    anyone reading the run load the same weights through the ordinary path.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from darling_nemo.mini.policy import char_tokenizer, tiny_llama, word_tokenizer

    policy = cfg.policy
    if policy.kind == "tiny":
        path = output_dir / "initial_policy"
        if not (path / "config.json").is_file():
            tokenizer = (
                word_tokenizer(task.word_vocabulary) if task.word_vocabulary else char_tokenizer()
            )
            prompt_tokens = max(
                len(tokenizer(row["prompt"])["input_ids"]) for row in task.train_rows
            )
            model = tiny_llama(
                tokenizer,
                hidden_size=policy.hidden_size,
                num_layers=policy.num_layers,
                num_heads=policy.num_heads,
                intermediate_size=policy.intermediate_size,
                max_positions=prompt_tokens + cfg.trainer.max_completion_length + 1,
            )
            tokenizer.save_pretrained(path)
            model.save_pretrained(path)
        name_or_path, dtype = str(path), torch.float32
    else:
        name_or_path = policy.name_or_path
        dtype = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}[policy.dtype]
        if dtype is None:
            dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    return model, tokenizer


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def validate_trl_config(cfg: Mapping[str, Any]) -> TrlRunConfig:
    """The whole `engine: trl` config, strictly: raises ConfigError naming every bad key
    path. Imports no torch, so a recipe's --dry-run can call it anywhere."""
    return validate_section(TrlRunConfig, dict(cfg))


validate_run_config = validate_trl_config  # the name recipes/darling_mini.py imports


def zero_reward_note(cfg: TrlRunConfig) -> str | None:
    """Why a run will log reward and loss 0 at every step, when the config says so."""
    if cfg.policy.kind != "tiny" or cfg.task.kind != "math":
        return None
    return (
        "note: policy.kind=tiny is a small randomly initialised model: on task.kind=math it "
        "practically never writes the correct answer, so quality is 0, DARLING's reward "
        "(quality x diversity) and every advantage are 0, and the loss is 0 at every step. "
        "This run checks the plumbing (generation, judge, logging, checkpoints); to learn, "
        "use policy={kind: pretrained, name_or_path: ...}."
    )


@contextmanager
def upstream_deprecations_silenced() -> Iterator[None]:
    """Hide the FutureWarnings TRL's own code causes and this package cannot fix.

    transformers 5 renamed PreTrainedModel's `is_gradient_checkpointing` and
    `gradient_checkpointing_enable/disable` to `*activation_checkpointing*` (the old names
    warn, "will be removed in v6"); TRL 1.16 still calls the old names
    (trl.models.utils.disable_gradient_checkpointing, around every generation). Only those
    three messages, raised in transformers.modeling_utils, are silenced, only inside this
    block; every other warning shows.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`(is_gradient_checkpointing|gradient_checkpointing_(enable|disable))` "
            r"is deprecated",
            category=FutureWarning,
            module=r"transformers\.modeling_utils",
        )
        yield


def grpo_args(cfg: TrlRunConfig, output_dir: Path) -> Any:
    """TRL's GRPOConfig for a validated run config (scale_rewards='none': see module doc)."""
    import torch
    from trl import GRPOConfig

    t = cfg.trainer
    use_bf16 = t.precision == "bfloat16" or (t.precision == "auto" and torch.cuda.is_available())
    rollout = t.prompts_per_step * t.group_size  # divisible by updates_per_rollout (schema)
    # TRL turns checkpointing on by default under the name transformers 5 deprecated
    # (`gradient_checkpointing`, a FutureWarning per run); the same setting under the new
    # name where this transformers has it.
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    checkpointing = (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )
    return GRPOConfig(
        **{checkpointing: True},
        output_dir=str(output_dir),
        seed=cfg.seed,
        data_seed=cfg.seed,
        max_steps=t.max_steps,
        per_device_train_batch_size=rollout // t.updates_per_rollout,
        steps_per_generation=t.updates_per_rollout,
        gradient_accumulation_steps=1,
        num_generations=t.group_size,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        temperature=t.temperature,
        top_p=t.top_p,
        max_completion_length=t.max_completion_length,
        loss_type=t.loss_type,
        epsilon=t.clip_low,
        epsilon_high=t.clip_high,
        beta=t.kl_coef,
        scale_rewards="none",
        bf16=use_bf16,
        use_cpu=not torch.cuda.is_available(),
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        logging_steps=t.logging_steps,
        report_to=list(cfg.logging.report_to),
        run_name=output_dir.name,
        disable_tqdm=not cfg.logging.progress_bar,
        optim="adamw_torch",
        dataloader_num_workers=0,
        shuffle_dataset=False,  # the rows come pre-shuffled: see `prompt_stream`
    )


def prompt_stream(rows: Sequence[dict[str, Any]], cfg: TrlRunConfig) -> list[dict[str, Any]]:
    """The training prompts for the whole run, one seeded permutation of `rows` per pass.

    TRL's own shuffling draws each epoch's order from a generator that is not checkpointed,
    so a resumed run would see other prompts than an uninterrupted one. Handing TRL one long
    pre-shuffled "epoch" (and shuffle_dataset=False) makes the order a function of the seed
    alone: interrupted and resumed, a run trains on exactly the same batches.
    """
    t = cfg.trainer
    rollouts = -(-t.max_steps // t.updates_per_rollout)  # ceil
    needed = rollouts * t.prompts_per_step
    rng = np.random.default_rng(cfg.seed)
    stream: list[dict[str, Any]] = []
    while len(stream) < needed:
        stream.extend(rows[i] for i in rng.permutation(len(rows)))
    return stream


def checkpoint_step(path: Path) -> int:
    """N of a `checkpoint-N` directory."""
    return int(path.name.removeprefix("checkpoint-"))


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete `checkpoint-N` directory (it has a trainer state), or None."""
    found = [
        p
        for p in output_dir.glob("checkpoint-*")
        if p.name.removeprefix("checkpoint-").isdigit() and (p / "trainer_state.json").is_file()
    ]
    return max(found, key=checkpoint_step) if found else None


def make_eval_callback(
    run_cfg: TrlRunConfig, task: Task, tokenizer: Any, history_path: Path
) -> Any:
    """A TrainerCallback that evaluates held-out prompts every `evaluation.every_steps`."""
    from transformers import TrainerCallback

    def evaluate_now(model: Any, step: int) -> None:
        result = run_evaluation(run_cfg, task, model, tokenizer, step)
        with history_path.open("a") as f:
            f.write(json.dumps({"step": step, **result}) + "\n")

    every = run_cfg.evaluation.every_steps

    class HeldOutEvaluation(TrainerCallback):
        def on_train_begin(
            self, args: Any, state: Any, control: Any, model: Any = None, **_: Any
        ) -> None:
            if state.global_step == 0 and not history_steps(history_path):
                evaluate_now(model, 0)

        def on_step_end(
            self, args: Any, state: Any, control: Any, model: Any = None, **_: Any
        ) -> None:
            if every and state.global_step % every == 0 and state.global_step != state.max_steps:
                evaluate_now(model, state.global_step)

    return HeldOutEvaluation()


def silence_console_metrics(trainer: Any) -> None:
    """Keep the progress bar (if any) but stop printing every log dict to the console;
    the metrics still go to TensorBoard/wandb and to train_log.jsonl."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        def on_log(self, *args: Any, **kwargs: Any) -> None:
            pass

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(BarOnly())


def history_steps(path: Path) -> list[int]:
    if not path.is_file():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def truncate_history(path: Path, after_step: int) -> None:
    """Drop evaluation records past `after_step`: a resumed run recomputes those steps."""
    if not path.is_file():
        return
    keep = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and json.loads(line)["step"] <= after_step
    ]
    path.write_text("".join(line + "\n" for line in keep))


def run_evaluation(
    cfg: TrlRunConfig, task: Task, model: Any, tokenizer: Any, step: int
) -> dict[str, float]:
    from darling_nemo.mini.evaluate import evaluate

    rows = task.heldout_rows[: cfg.evaluation.max_prompts]
    ev = cfg.evaluation
    return evaluate(
        model,
        tokenizer,
        rows,
        task.quality,
        task.judge,
        cfg.darling.judge.threshold,
        num_samples=ev.num_samples,
        ks=ev.pass_at_k,
        max_new_tokens=cfg.trainer.max_completion_length,
        temperature=ev.temperature,
        seed=cfg.seed + step,
    )


# Settings that may differ between an interrupted run and its continuation because they do
# not change what is trained or measured: where outputs go, what is printed or logged where,
# how many CPU threads compute the same numbers, how often (and how many) checkpoints are
# kept. trainer.max_steps may also change, see `check_resume_config`.
RESUME_MAY_CHANGE = (
    "resume",
    "output_dir",
    "torch_threads",
    "logging",
    "trainer.save_steps",
    "trainer.save_total_limit",
)


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": value} for nested mappings (lists are values)."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_settings(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def changed_settings(
    saved: Mapping[str, Any], new: Mapping[str, Any], ignore: Sequence[str] = ()
) -> list[str]:
    """One line "key.path: old -> new" per setting that differs between two nested configs.

    A key missing on one side shows as <unset>; key paths in `ignore` (and everything under
    them) are not compared. Used before reusing anything a run saved (a TRL run directory,
    the miniature's warm start), so changed settings are refused instead of silently reusing
    or mixing old results.
    """
    before, after = flat_settings(saved), flat_settings(new)

    def ignored(path: str) -> bool:
        return any(path == key or path.startswith(f"{key}.") for key in ignore)

    def show(flat: Mapping[str, Any], path: str) -> str:
        return repr(flat[path]) if path in flat else "<unset>"

    return [
        f"{path}: {show(before, path)} -> {show(after, path)}"
        for path in sorted(before.keys() | after.keys())
        if not ignored(path)
        and (path not in before or path not in after or before[path] != after[path])
    ]


def check_resume_config(run_cfg: TrlRunConfig) -> None:
    """Refuse an output_dir that holds a run made with settings that change its results.

    The config saved there (config.yaml) is compared key by key with `run_cfg`, except the
    keys in RESUME_MAY_CHANGE. trainer.max_steps may grow or shrink under a constant
    learning rate (the prompt order of a longer run starts with the shorter run's, see
    `prompt_stream`), but never below the steps already trained; with a linear or cosine
    schedule the learning rate of every step depends on max_steps, so it may not change.
    """
    output_dir = Path(run_cfg.output_dir)
    final_path = output_dir / "final_metrics.json"
    checkpoint = last_checkpoint(output_dir)
    if not run_cfg.resume and (checkpoint or final_path.is_file()):
        raise ConfigError(
            f"output_dir {output_dir} already holds a run: set resume: true to continue it, "
            "or choose another output_dir (nothing is deleted for you)"
        )
    saved_path = output_dir / "config.yaml"
    if not saved_path.is_file():
        return
    saved = yaml.safe_load(saved_path.read_text()) or {}
    new = run_cfg.model_dump(mode="json")
    ignore = list(RESUME_MAY_CHANGE)
    constant_lr = run_cfg.trainer.lr_scheduler == "constant"
    if constant_lr and saved.get("trainer", {}).get("lr_scheduler") == "constant":
        ignore.append("trainer.max_steps")
    changes = changed_settings(saved, new, ignore)
    if changes:
        hint = (
            "\n(trainer.max_steps may change only with trainer.lr_scheduler: constant)"
            if any(c.startswith("trainer.max_steps:") for c in changes)
            else ""
        )
        raise ConfigError(
            f"{output_dir} holds a run made with other settings (saved in {saved_path}):\n  "
            + "\n  ".join(changes)
            + f"{hint}\nUse another output_dir, or delete {output_dir} to start over."
        )
    trained = max(
        checkpoint_step(checkpoint) if checkpoint else 0,
        json.loads(final_path.read_text())["global_step"] if final_path.is_file() else 0,
    )
    if trained > run_cfg.trainer.max_steps:
        raise ConfigError(
            f"trainer.max_steps={run_cfg.trainer.max_steps}, but {output_dir} already holds "
            f"{trained} trained steps: use another output_dir for a shorter run"
        )


def check_wandb_installed(run_cfg: TrlRunConfig) -> None:
    """Refuse logging.report_to: [wandb] without wandb, before the run directory is written."""
    if "wandb" not in run_cfg.logging.report_to:
        return
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError(
            "logging.report_to includes wandb, but wandb is not installed: "
            "uv sync --extra trl (or pip install 'wandb>=0.21'), or drop wandb from "
            "logging.report_to"
        ) from None


@contextmanager
def wandb_run_environment(run_cfg: TrlRunConfig, output_dir: Path) -> Iterator[None]:
    """With logging.report_to: [wandb], TRL's WandbCallback logs to a run made from
    WANDB_MODE / WANDB_PROJECT / WANDB_DIR: set from `logging` (and WANDB_DIR = output_dir)
    for this run unless already in the environment, and restored afterwards. The wandb run
    is finished at the end (flushing an offline run's file), so another run in the same
    process starts its own wandb run instead of logging into this one."""
    if "wandb" not in run_cfg.logging.report_to:
        yield
        return
    settings = {
        "WANDB_MODE": run_cfg.logging.wandb_mode,
        "WANDB_PROJECT": run_cfg.logging.wandb_project,
        "WANDB_DIR": str(output_dir),
    }
    added = [name for name in settings if name not in os.environ]
    os.environ.update({name: settings[name] for name in added})
    exit_code = 1  # a run that raised is marked failed in wandb
    try:
        yield
        exit_code = 0
    finally:
        import wandb

        if wandb.run is not None:
            wandb.finish(exit_code=exit_code)
        for name in added:
            os.environ.pop(name, None)


def run(cfg: Mapping[str, Any]) -> dict[str, float]:
    """Train with TRL's GRPOTrainer and DARLING rewards; return the final metrics.

    `cfg` is the loaded YAML (`engine: trl`), validated here in full. Output directory:
    checkpoints (`checkpoint-N`), `config.yaml`, TensorBoard logs, `eval_history.jsonl`
    (held-out evaluation at step 0, every `evaluation.every_steps`, and at the end) and
    `final_metrics.json`. With `resume: true` (default) a rerun continues from the newest
    checkpoint; a finished run returns its saved final metrics. A rerun whose settings
    would change the results is refused, naming the keys (`check_resume_config`).

    A policy whose tokenizer has a chat template (an instruct model) gets every prompt as
    one user message, so TRL renders it in that template (and the held-out evaluation
    too); a policy without one (the tiny policies, most base models) gets the plain text.
    """
    run_cfg = validate_trl_config(cfg)
    check_wandb_installed(run_cfg)
    output_dir = Path(run_cfg.output_dir)
    final_path = output_dir / "final_metrics.json"
    check_resume_config(run_cfg)
    if run_cfg.resume and final_path.is_file():
        final = json.loads(final_path.read_text())
        if final.get("global_step") == run_cfg.trainer.max_steps:
            return final
    output_dir.mkdir(parents=True, exist_ok=True)
    save_config(run_cfg.model_dump(mode="json"), output_dir / "config.yaml")
    note = zero_reward_note(run_cfg)
    if note:
        print(note, flush=True)
    with wandb_run_environment(run_cfg, output_dir), upstream_deprecations_silenced():
        return train(run_cfg, output_dir)


def train(run_cfg: TrlRunConfig, output_dir: Path) -> dict[str, Any]:
    """The body of `run`, once the run directory is checked and holds config.yaml."""
    import torch
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOTrainer

    final_path = output_dir / "final_metrics.json"
    history_path = output_dir / "eval_history.jsonl"
    if run_cfg.torch_threads is not None:
        torch.set_num_threads(run_cfg.torch_threads)
    set_seed(run_cfg.seed)
    task = build_task(run_cfg)
    model, tokenizer = build_policy(run_cfg, task, output_dir)
    if tokenizer.chat_template:  # a chat/instruct policy: TRL renders each prompt in it
        task.train_rows = conversational(task.train_rows)
        task.heldout_rows = conversational(task.heldout_rows)
    args = grpo_args(run_cfg, output_dir)
    reward = DarlingReward(
        task.quality, run_cfg.darling, run_cfg.trainer.group_size, judge=task.judge
    )
    resume_from = last_checkpoint(output_dir) if run_cfg.resume else None
    resume_step = checkpoint_step(resume_from) if resume_from else 0
    truncate_history(history_path, resume_step if resume_from else -1)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(prompt_stream(task.train_rows, run_cfg)),
        processing_class=tokenizer,
        callbacks=[make_eval_callback(run_cfg, task, tokenizer, history_path)]
        if task.heldout_rows
        else None,
    )
    reward.check_trainer_args(trainer.args, trainer.reward_funcs)
    if not run_cfg.logging.print_metrics:
        silence_console_metrics(trainer)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    train_seconds = time.perf_counter() - started
    trainer.save_model(str(output_dir / "final"))

    final: dict[str, Any] = {
        "global_step": trainer.state.global_step,
        "resumed_from_step": resume_step,
    }
    logged = [entry for entry in trainer.state.log_history if "darling/quality_mean" in entry]
    (output_dir / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in logged))
    if logged:
        final.update({k: v for k, v in logged[-1].items() if k.startswith("darling/")})
    if task.heldout_rows:
        result = run_evaluation(run_cfg, task, trainer.model, tokenizer, trainer.state.global_step)
        with history_path.open("a") as f:
            f.write(json.dumps({"step": trainer.state.global_step, **result}) + "\n")
        final.update({f"eval/{k}": v for k, v in result.items()})
    final["train_seconds_this_session"] = train_seconds
    final_path.write_text(json.dumps(final, indent=2) + "\n")
    return final
