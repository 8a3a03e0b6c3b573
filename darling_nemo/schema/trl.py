"""The single-node engine (TRL GRPOTrainer, `engine: trl`) and the CPU miniature.

Read by darling_nemo/trl/ and recipes/darling_mini.py. A miniature is a TRL run per seed
and arm: the settings both share are `TrlSharedConfig`, and `MiniConfig.arm_run` makes an
arm's run config from the miniature's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, model_validator

from darling_nemo import methods
from darling_nemo.methods.base import EMBEDDINGS
from darling_nemo.schema.base import Strict, use_union_members
from darling_nemo.schema.darling import DarlingConfig, group_size_problem, inputs_problem
from darling_nemo.schema.judges import LexicalJudgeConfig


class TinyPolicyConfig(Strict):
    """A small Llama built from these numbers over a tokenizer the task makes (no download)."""

    kind: Literal["tiny"] = "tiny"
    hidden_size: int = Field(64, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(256, ge=8)


class PretrainedPolicyConfig(Strict):
    """A causal LM and its tokenizer, from a local directory or the Hugging Face hub."""

    kind: Literal["pretrained"]
    name_or_path: str
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on a GPU, fp32 on CPU


PolicyConfig = Annotated[TinyPolicyConfig | PretrainedPolicyConfig, Field(discriminator="kind")]


class TaskSection(Strict):
    """What every TRL `task:` section says about its task to the checks below (the task
    registry, darling_nemo/tasks/, holds the rest)."""

    # The task decides equivalence by its own rule, said in words: darling.judge stays unset.
    own_judge_rule: ClassVar[str] = ""
    # Graded scores and no final answer: the methods that need one are refused.
    graded: ClassVar[bool] = False
    # The task embeds responses itself (tasks.Task.embeddings): DQO needs no embedding judge.
    own_embeddings: ClassVar[bool] = False
    # Keys added after runs were saved without them: a saved run's config that lacks one is
    # read with the key's default, the behaviour that run had (resume's comparison).
    added_keys: ClassVar[tuple[str, ...]] = ()
    # Keys that change only the judge training asks (the miniature's warm start, supervised,
    # asks none: a warm start is reused across them).
    judge_keys: ClassVar[tuple[str, ...]] = ()

    @property
    def final_answers(self) -> bool:
        """Whether its responses have final answers to compare (the methods with answer
        classes, outcome, need them): a verifier's task does, a graded one does not."""
        return not type(self).graded


JudgeRate = Annotated[float, Field(ge=0.0, lt=1.0)]  # a pair judge's error rate of one kind


class NoisyJudgeTaskSection(TaskSection):
    """A miniature task whose own exact judge can be made wrong on purpose for training (its
    evaluation always counts distinct answers exactly): `FlippedJudge` (mini/task.py)."""

    # Keys added after runs were saved without them (exact, as every run before the keys
    # was); they change only the judge training asks, so a warm start is reused across them.
    added_keys: ClassVar[tuple[str, ...]] = (
        "judge_accuracy",
        "judge_seed",
        "judge_false_similar",
        "judge_false_different",
    )
    judge_keys: ClassVar[tuple[str, ...]] = added_keys
    # The training judge's accuracy: the exact judge, its verdict flipped on this fraction
    # of pairs' complement (seeded by judge_seed and the pair's texts, symmetric).
    judge_accuracy: float = Field(1.0, ge=0.5, le=1.0)
    # Or asymmetric errors (judge_accuracy left at 1.0): a pair of different answers is
    # judged "similar" with probability judge_false_similar, a pair of one answer written
    # twice "different" with judge_false_different (a measured judge's two rates).
    judge_false_similar: float = Field(0.0, ge=0.0, lt=1.0)
    judge_false_different: float = Field(0.0, ge=0.0, lt=1.0)
    judge_seed: int = 0

    @model_validator(mode="after")
    def _one_kind_of_noise(self) -> NoisyJudgeTaskSection:
        rates = self.judge_false_similar or self.judge_false_different
        if rates and self.judge_accuracy != 1.0:
            raise ValueError(
                f"judge_accuracy={self.judge_accuracy} flips both kinds of pair alike: give "
                "it or judge_false_similar / judge_false_different, not both"
            )
        return self


class DigitSumTaskConfig(NoisyJudgeTaskSection):
    """The miniature's task (darling_nemo/mini/task.py): `length` digits that total S."""

    own_judge_rule: ClassVar[str] = "same digit multiset"
    own_embeddings: ClassVar[bool] = True
    kind: Literal["digit_sum"]
    # More than 5 digits, so the core's short-answer rule (<= 5 words) leaves every pair of
    # distinct answers to the digit-multiset judge.
    length: int = Field(6, ge=6, le=12)
    min_digit: int = Field(1, ge=0, le=9)  # 1..6: dice
    max_digit: int = Field(6, ge=0, le=9)
    min_target: int = Field(12, ge=0)
    max_target: int = Field(30, ge=0, le=99)  # prompts write the target with two digits
    heldout_every: int = Field(4, ge=2)  # targets min_target + 1 + k * heldout_every: eval only

    @model_validator(mode="after")
    def _feasible(self) -> DigitSumTaskConfig:
        low, high = self.length * self.min_digit, self.length * self.max_digit
        if self.min_digit >= self.max_digit:
            raise ValueError(f"min_digit={self.min_digit} must be < max_digit={self.max_digit}")
        if not low <= self.min_target < self.max_target <= high:
            raise ValueError(
                f"need {low} <= min_target < max_target <= {high} for {self.length} digits "
                f"in {self.min_digit}..{self.max_digit}; got {self.min_target}..{self.max_target}"
            )
        return self


class LatticeRoutesTaskConfig(NoisyJudgeTaskSection):
    """The pre-registered miniature's task (darling_nemo/mini/routes.py): a route of `side` R
    and `side` U moves that avoids a prompt's 1-3 blocked lattice points."""

    own_judge_rule: ClassVar[str] = "the same route"
    kind: Literal["lattice_routes"]
    side: int = Field(4, ge=2, le=4)  # 4: 8 moves, 70 routes; prompts name points 0..side
    # The warm start's habit, shared by every prompt: weight exp(-turn_cost * turns -
    # up_first_cost * [first move is U]) over the correct routes of a grid.
    turn_cost: float = Field(1.0, ge=0.0)
    up_first_cost: float = Field(3.0, ge=0.0)
    grid_seed: int = 0  # the fixed order of the solvable grids: held-out first, then train
    heldout_grids: int = Field(128, ge=1)  # never trained on, by RL or the warm start
    train_grids: int = Field(400, ge=1)  # RL's prompts
    hard_mass: float = Field(0.05, gt=0.0, le=1.0)  # a grid is hard below this habit mass
    # false: the warm start's routes follow the habit whatever the prompt's walls (it learns
    # the format and the habit; reading the walls is left to RL); true: only routes that
    # avoid the walls (it learns to read them too)
    warm_start_obeys_walls: bool = False


class MathTaskConfig(TaskSection):
    """Verifiable math from a JSONL file; quality 1 if math-verify accepts the boxed answer."""

    # The prompt budget: no row of a run saved before it was refused or cut, since none was.
    added_keys: ClassVar[tuple[str, ...]] = ("max_prompt_tokens", "long_prompts")
    kind: Literal["math"]
    data_path: str  # relative paths are relative to the working directory
    question_key: str = "question"
    answer_key: str = "answer"
    max_prompts: int | None = Field(None, ge=1)
    heldout_prompts: int = Field(0, ge=0)  # the last N rows are kept for evaluation only
    prompt_template: str = "{question}\nPut your final answer within \\boxed{{}}."
    # The policy's prompt budget in its tokens (a tiny policy's: words), and what happens to
    # a longer prompt: refused at the data check naming its row, or cut to fit (the question
    # is cut, the template kept) with one warning (tasks/prompt_budget.py).
    max_prompt_tokens: int = Field(2048, ge=1)
    long_prompts: Literal["refuse", "truncate"] = "refuse"


class RewardModelQualityConfig(Strict):
    """A sequence-classification reward model; quality = its score of (prompt, response)."""

    kind: Literal["reward_model"]
    name_or_path: str
    max_length: int = Field(2048, ge=16)
    batch_size: int = Field(8, ge=1)


class LengthStandInQualityConfig(Strict):
    """NOT a quality measure: min(words, target_words) / target_words, for smoke runs only."""

    kind: Literal["length_stand_in"] = "length_stand_in"
    target_words: int = Field(50, ge=1)


ChatQualityConfig = Annotated[
    RewardModelQualityConfig | LengthStandInQualityConfig, Field(discriminator="kind")
]


class ChatTaskConfig(TaskSection):
    """Open-ended prompts (WildChat-style) from a JSONL file, scored by `quality`."""

    graded: ClassVar[bool] = True
    added_keys: ClassVar[tuple[str, ...]] = ("max_prompt_tokens", "long_prompts")  # as math's
    kind: Literal["chat"]
    data_path: str
    prompt_key: str = "prompt"
    max_prompts: int | None = Field(None, ge=1)
    max_prompt_tokens: int = Field(2048, ge=1)  # as in MathTaskConfig
    long_prompts: Literal["refuse", "truncate"] = "refuse"
    quality: ChatQualityConfig = Field(default_factory=LengthStandInQualityConfig)


class RewardFuncsTaskConfig(TaskSection):
    """A user's TRL-style reward functions over prompts from a JSONL file (docs/your-own-task.md):
    quality = the weighted sum of `reward_funcs`, the file's other columns their keywords."""

    graded: ClassVar[bool] = True  # a user's sum of scores: no final answer to compare
    # A run saved before task.answer_func had none (its default, None).
    added_keys: ClassVar[tuple[str, ...]] = ("answer_func",)
    kind: Literal["reward_funcs"]
    data_path: str
    prompt_key: str = "prompt"
    reward_funcs: list[str] = Field(min_length=1)  # import paths: my_module:my_function
    reward_weights: list[float] | None = None  # TRL's reward_weights; None: 1 each
    python_path: list[str] = Field(default_factory=lambda: ["."])  # where the modules are
    # my_module:my_function giving each completion's final answer (a str, None: no answer),
    # for the methods that compare final answers (outcome); None: no final answers.
    answer_func: str | None = None
    reward_workers: int = Field(2, ge=1)  # processes calling the functions
    reward_timeout_s: float = Field(60.0, gt=0.0)  # per call; a later call is stopped, scores 0
    max_prompts: int | None = Field(None, ge=1)
    max_prompt_tokens: int = Field(2048, ge=1)  # as in MathTaskConfig
    long_prompts: Literal["refuse", "truncate"] = "refuse"

    @property
    def final_answers(self) -> bool:
        return self.answer_func is not None

    @model_validator(mode="after")
    def _one_weight_per_function(self) -> RewardFuncsTaskConfig:
        weights, funcs = self.reward_weights, self.reward_funcs
        if weights is not None and len(weights) != len(funcs):
            raise ValueError(
                f"reward_weights has {len(weights)} weight(s) for {len(funcs)} reward_funcs"
            )
        return self


BUILTIN_TASK_CONFIGS: tuple[type[TaskSection], ...] = (
    DigitSumTaskConfig,
    LatticeRoutesTaskConfig,
    MathTaskConfig,
    ChatTaskConfig,
    RewardFuncsTaskConfig,
)
TaskConfig = Annotated[Union[BUILTIN_TASK_CONFIGS], Field(discriminator="kind")]  # noqa: UP007
"""The shipped tasks' sections; a registered task's joins them (`use_task_configs`)."""


def use_task_configs(configs: tuple[type, ...]) -> None:
    """Make every field that holds a TRL `task:` section accept exactly these sections, each
    picked by its `kind`. Called by the task registry when a task is registered or removed."""
    use_union_members(BUILTIN_TASK_CONFIGS, configs)


class TrlTrainerConfig(Strict):
    """GRPO settings handed to TRL. TRL's `global_step` counts optimizer updates."""

    max_steps: int = Field(100, ge=1)
    prompts_per_step: int = Field(8, ge=1)  # prompts per rollout batch
    group_size: int = Field(8, ge=2)  # responses per prompt (TRL num_generations)
    updates_per_rollout: int = Field(1, ge=1)  # optimizer steps per rollout batch (mini-batches)
    learning_rate: float = Field(1e-6, gt=0.0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, gt=0.0)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_completion_length: int = Field(256, ge=1)
    # Token-level aggregation like the reference's verl "token-mean": bnpo = mean over the
    # tokens of each micro-batch; dapo = over the tokens of the whole rollout batch.
    loss_type: Literal["bnpo", "dapo"] = "bnpo"
    clip_low: float = Field(0.2, ge=0.0)
    clip_high: float = Field(0.2, ge=0.0)
    kl_coef: float = Field(0.0, ge=0.0)  # TRL beta (k3 estimator); 0 = no reference model
    precision: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on a GPU
    save_steps: int = Field(50, ge=1)
    save_total_limit: int = Field(2, ge=1)
    logging_steps: int = Field(1, ge=1)
    # adamw_torch: torch.optim.AdamW. adamw_portable: the same update with a correctly rounded
    # sqrt, whose bits do not depend on the CPU (darling_nemo/mini/optim.py); the miniature's
    # `cpu_kernels: portable` selects it.
    optimizer: Literal["adamw_torch", "adamw_portable"] = "adamw_torch"

    @model_validator(mode="after")
    def _whole_mini_batches(self) -> TrlTrainerConfig:
        rollout = self.prompts_per_step * self.group_size
        if rollout % self.updates_per_rollout:
            raise ValueError(
                f"prompts_per_step * group_size = {rollout} responses do not split into "
                f"updates_per_rollout={self.updates_per_rollout} equal mini-batches"
            )
        return self


class EvaluationConfig(Strict):
    """Sampling evaluation on held-out prompts: pass@k and distinct correct answers."""

    every_steps: int = Field(0, ge=0)  # 0: only before and after training
    num_samples: int = Field(16, ge=1)  # n per prompt
    pass_at_k: list[int] = Field(default_factory=lambda: [1, 4, 16])
    temperature: float = Field(1.0, gt=0.0)
    max_prompts: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _k_within_samples(self) -> EvaluationConfig:
        bad = [k for k in self.pass_at_k if not 1 <= k <= self.num_samples]
        if bad:
            raise ValueError(
                f"pass_at_k {bad}: every k must be in 1..num_samples={self.num_samples}"
            )
        return self


class TrlLoggingConfig(Strict):
    report_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["tensorboard"]
    )
    wandb_project: str = "darling-nemo"
    wandb_mode: Literal["offline", "online"] = "offline"
    progress_bar: bool = True
    print_metrics: bool = True  # every logged step's metrics on the console (TRL's habit)


class TrlSharedConfig(Strict):
    """What a TRL run and the miniature share: the miniature hands these to every arm."""

    # CPU threads for torch (None: torch's default). Tiny models run fastest on 1, and far
    # slower on 2 when other processes share the cores (threads spin waiting for each other).
    torch_threads: int | None = Field(None, ge=1)
    trainer: TrlTrainerConfig = Field(default_factory=TrlTrainerConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    logging: TrlLoggingConfig = Field(default_factory=TrlLoggingConfig)


def check_task_judge(task: TaskSection, darling: DarlingConfig, key: str) -> None:
    """A task with its own equivalence rule (digit_sum's): refuse another judge at `key`."""
    rule = type(task).own_judge_rule
    if rule and not isinstance(darling.judge, LexicalJudgeConfig):
        raise ValueError(
            f"{key}: the {task.kind} task decides equivalence by its own rule ({rule}); "
            f"leave {key} unset"
        )


def check_method_fits(task: TaskSection, darling: DarlingConfig, group_size: int, key: str) -> None:
    """Refuse a `darling.method` the task or the group size cannot serve, naming `key`."""
    method = methods.method(darling.method)
    answers_suffice = method.answer_classes and not method.binary_rewards
    needs = method.task_needs
    if needs and type(task).graded and not (answers_suffice and task.final_answers):
        also = (
            ", or set task.answer_func"
            if answers_suffice and "answer_func" in type(task).model_fields
            else ""
        )
        raise ValueError(
            f"{key}.method={darling.method} needs {needs}{method.needs_detail}; "
            f"task.kind={task.kind} has graded scores and no final answer: use method darling"
            f"{also}"
        )
    # a task with its own embeddings (the dice task's) gives them whatever the judge
    problem = inputs_problem(darling, key, {EMBEDDINGS} if type(task).own_embeddings else ())
    if problem:
        raise ValueError(problem)
    problem = group_size_problem(darling, key, "trainer.group_size", group_size)
    if problem:
        raise ValueError(problem)


class TrlRunConfig(TrlSharedConfig):
    """A whole single-node run: `recipes/darling_*.py` with `engine: trl` validates this."""

    engine: Literal["trl"]
    seed: int = 42
    output_dir: str = "runs/trl"
    resume: bool = True  # continue from the newest checkpoint in output_dir
    policy: PolicyConfig = Field(default_factory=TinyPolicyConfig)
    task: TaskConfig
    darling: DarlingConfig = Field(default_factory=DarlingConfig)

    @model_validator(mode="after")
    def _digit_sum_has_its_own_judge(self) -> TrlRunConfig:
        check_task_judge(self.task, self.darling, "darling.judge")
        check_method_fits(self.task, self.darling, self.trainer.group_size, "darling")
        return self


class WarmStartConfig(Strict):
    """Supervised warm start of the miniature's tiny policy (darling_nemo/mini/warm_start.py).
    zipf_exponent is the dice task's habit; the routes task's is in its `task:` section."""

    steps: int = Field(200, ge=1)
    batch_size: int = Field(64, ge=1)
    learning_rate: float = Field(3e-3, gt=0.0)
    zipf_exponent: float = Field(1.0, ge=0.0)  # 0: every correct digit multiset equally often


MiniTaskConfig = Annotated[
    DigitSumTaskConfig | LatticeRoutesTaskConfig, Field(discriminator="kind")
]
"""The tasks the miniature warm-starts a tiny policy on (the task registry's `warm_start`)."""


class MiniConfig(TrlSharedConfig):
    """`recipes/darling_mini.py`: per seed, one warm start, then one TRL run per arm.

    Output layout: <output_dir>/seed-<s>/warm_start and <output_dir>/seed-<s>/<arm>.
    """

    seeds: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5], min_length=1)
    output_dir: str = "runs/mini"
    torch_threads: int | None = Field(1, ge=1)  # the miniature's tiny models: one thread
    # portable: the same CPU kernels on every x86-64 CPU with AVX2 (torch's AVX2 kernels, MKL's
    # COMPATIBLE branch), so the table reproduces across such machines; native: this CPU's
    # fastest kernels, whose rounding differs between CPUs (darling_nemo/mini/reproducibility.py)
    cpu_kernels: Literal["portable", "native"] = "portable"
    # arm runs at once, each in its own process (2 on 2 cores: about half the wall time);
    # the numbers are the same for any count (darling_nemo/trl/mini_arms.py)
    workers: int = Field(1, ge=1)
    policy: TinyPolicyConfig = Field(default_factory=TinyPolicyConfig)
    task: MiniTaskConfig
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    # name -> darling: section; every other setting is shared. The first arm is the baseline.
    arms: dict[str, DarlingConfig] = Field(min_length=1)
    # the metrics whose per-seed differences to the first arm (paired 95% t-interval) the
    # report lists: pass@<k> for a k of evaluation.pass_at_k, distinct_correct, distinct_all
    differences: list[str] = Field(
        default_factory=lambda: ["pass@1", "distinct_correct"], min_length=1
    )
    # arm -> its training judge's accuracy (task.judge_accuracy for that arm; the others keep
    # task.judge_accuracy): the judge sweep (conf/mini/judge_sweep.yaml)
    judge_accuracy: dict[str, Annotated[float, Field(ge=0.5, le=1.0)]] = Field(default_factory=dict)
    # arm -> its training judge's [false "similar", false "different"] rates (the task's
    # judge_false_similar / judge_false_different for that arm): a measured judge's errors at
    # two thresholds side by side (conf/mini/routes_judge_rates.yaml)
    judge_rates: dict[str, tuple[JudgeRate, JudgeRate]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _arms_leave_the_judge_to_the_task(self) -> MiniConfig:
        for name, darling in self.arms.items():
            check_task_judge(self.task, darling, f"arms.{name}.judge")
            check_method_fits(self.task, darling, self.trainer.group_size, f"arms.{name}")
        passes = [f"pass@{k}" for k in self.evaluation.pass_at_k]
        measured = [
            *passes,
            "distinct_correct",
            "distinct_all",
            *(f"<stratum>/{p}" for p in passes),
        ]
        # "hard/pass@64": pass@k over the held-out rows of a stratum (trl/evaluate.py)
        unknown = [
            key
            for key in self.differences
            if key not in measured and key.partition("/")[2] not in passes
        ]
        if unknown:
            raise ValueError(f"differences: {unknown} not measured; choose from {measured}")
        for key in ("judge_accuracy", "judge_rates"):
            per_arm = getattr(self, key)
            strangers = [name for name in per_arm if name not in self.arms]
            if strangers:
                raise ValueError(f"{key}: {strangers} are not arms; arms are {list(self.arms)}")
            if per_arm and not isinstance(self.task, NoisyJudgeTaskSection):
                raise ValueError(
                    f"{key}: task.kind={self.task.kind} has no judge of chosen accuracy"
                )
        both = sorted(set(self.judge_accuracy) & set(self.judge_rates))
        if both:
            raise ValueError(
                f"judge_accuracy and judge_rates both name {both}: an arm's judge flips both "
                "kinds of pair alike or each at its own rate, not both"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _portable_kernels_take_the_portable_optimizer(cls, data: Any) -> Any:
        # torch's AdamW rounds its sqrt by the CPU (darling_nemo/mini/optim.py): portable
        # kernels would not make the run portable without the portable optimizer.
        kernels = cls.model_fields["cpu_kernels"].default
        if not isinstance(data, dict) or data.get("cpu_kernels", kernels) != "portable":
            return data
        trainer = data.get("trainer") or {}
        if not isinstance(trainer, dict):
            return data
        optimizer = trainer.get("optimizer", "adamw_portable")
        if optimizer != "adamw_portable":
            raise ValueError(
                f"trainer.optimizer={optimizer} rounds its square root by the CPU: with "
                "cpu_kernels: portable use adamw_portable (or cpu_kernels: native)"
            )
        return {**data, "trainer": {**trainer, "optimizer": "adamw_portable"}}

    def seed_dir(self, seed: int) -> Path:
        return Path(self.output_dir) / f"seed-{seed}"

    def arm_task(self, arm: str) -> DigitSumTaskConfig | LatticeRoutesTaskConfig:
        """The task as `arm` trains on it: its own judge accuracy (error rates) where
        `judge_accuracy` (`judge_rates`) names it."""
        if arm in self.judge_accuracy:
            return self.task.model_copy(update={"judge_accuracy": self.judge_accuracy[arm]})
        if arm in self.judge_rates:
            false_similar, false_different = self.judge_rates[arm]
            return self.task.model_copy(
                update={
                    "judge_accuracy": 1.0,
                    "judge_false_similar": false_similar,
                    "judge_false_different": false_different,
                }
            )
        return self.task

    def arm_run(self, seed: int, arm: str) -> TrlRunConfig:
        """The TRL run of one arm: the shared settings, this seed, the seed's warm start as
        the policy and the arm's `darling:` section."""
        shared = TrlRunConfig(
            engine="trl",
            task=self.arm_task(arm),
            **{name: getattr(self, name) for name in TrlSharedConfig.model_fields},
        )
        return shared.model_copy(
            update={
                "seed": seed,
                "output_dir": str(self.seed_dir(seed) / arm),
                "policy": PretrainedPolicyConfig(
                    kind="pretrained",
                    name_or_path=str(self.seed_dir(seed) / "warm_start"),
                    dtype="float32",
                ),
                "darling": self.arms[arm],
            }
        )
