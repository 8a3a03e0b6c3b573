"""Typed configs of the evaluation recipes: every default of an evaluation lives here, once.

Beside its only readers (darling_nemo/evals/, recipes/eval_*.py) rather than in
darling_nemo/schema/ (the training configs, one module per reader): no training code reads
these. The partition judge reuses `schema.JudgeConfig`, so a judge is configured the same
way for training and evaluation.
Unknown keys are errors naming the key path (`extra="forbid"`).
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import Field, field_validator, model_validator

from darling_nemo.export import LATEST
from darling_nemo.schema import (
    CrossEncoderJudgeConfig,
    JudgeConfig,
    Strict,
)

# ---------------------------------------------------------------------------------------------
# Generation (shared by the three evaluations)
# ---------------------------------------------------------------------------------------------


class GeneratorConfig(Strict):
    """Which model samples the responses, and through which engine."""

    # checkpoint directory or hub name (HF format); None: the eval's `run` (its HF export)
    model: str | None = None
    tokenizer: str | None = None  # default: the model's own
    backend: Literal["vllm", "transformers"] = "vllm"  # transformers: one machine, CPU ok
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    batch_size: int = Field(32, ge=1)  # transformers: sequences per generate() call
    chunk_items: int = Field(64, ge=1)  # items generated between two writes of the JSONL
    tensor_parallel_size: int = Field(1, ge=1)  # vllm
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)  # vllm
    max_model_len: int | None = Field(None, ge=1)  # vllm; None: the model's own


class PromptConfig(Strict):
    """How an item becomes the model's input.

    `template` is a Python format string over the item's fields ({question}, {prompt}).
    With `chat_template` the text is the user turn of the tokenizer's chat template (after
    `system`, if set); without it the text is fed as is (base models).
    """

    template: str = "{prompt}"
    system: str | None = None
    chat_template: bool = True


class SamplingConfig(Strict):
    n: int = Field(1, ge=1)  # samples per item
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(1024, ge=1)
    seed: int = 0  # item i is sampled with seed + crc32(item key): resumable, order-free


class EvalSource(Strict):
    """What is evaluated: `generator.model` (an HF folder or hub name), or a training run's
    checkpoint (`run`, `step`), exported to step_N/hf by darling_nemo.export."""

    run: str | None = None  # RESULTS_DIR/RUN_NAME (or its checkpoints/, or one step_N)
    step: int | Literal["latest"] = LATEST  # darling_nemo.export.LATEST: the newest step

    @model_validator(mode="after")
    def _one_model(self) -> EvalSource:
        model = self.generator.model  # type: ignore[attr-defined]  # every eval has one
        if (self.run is None) == (model is None):
            raise ValueError("set exactly one of `run` (a training run) and `generator.model`")
        return self


# ---------------------------------------------------------------------------------------------
# Math: pass@k with math-verify
# ---------------------------------------------------------------------------------------------


class MathBenchmark(Strict):
    """One problem set: a local file (.jsonl/.json/.parquet) or a datasets hub name."""

    name: str
    path: str | None = None
    dataset: str | None = None
    subset: str | None = None
    split: str = "test"
    question_key: str | None = None  # None: the first of question, problem
    answer_key: str | None = None  # None: the first of answer, final_answer
    id_key: str | None = None  # None: `id` when present, else the row number

    @model_validator(mode="after")
    def _one_source(self) -> MathBenchmark:
        if (self.path is None) == (self.dataset is None):
            raise ValueError(f"benchmark {self.name!r}: set exactly one of `path` and `dataset`")
        return self


class MathPrompt(PromptConfig):
    # The reference harness's "qwen-boxed" prompt (system turn + this user turn).
    template: str = (
        "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
    )
    system: str | None = "You are a helpful assistant."


class MathSampling(SamplingConfig):
    # Paper: n = 256 at temperature 0.6, top-p 0.95, up to 12k tokens.
    n: int = Field(256, ge=1)
    temperature: float = Field(0.6, ge=0.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(12288, ge=1)


class GradingConfig(Strict):
    workers: int = Field(4, ge=1)  # math-verify processes (1: grade in this process)
    timeout_s: int = Field(5, ge=1)  # per parse and per comparison (math-verify's alarm)


class ShardConfig(Strict):
    """Split the problems over processes (one vLLM engine per GPU group): shard i takes
    problems i, i + count, ... and appends to its own samples file."""

    index: int = Field(0, ge=0)
    count: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _index_below_count(self) -> ShardConfig:
        if self.index >= self.count:
            raise ValueError(f"shard.index must be < shard.count, got {self.index} of {self.count}")
        return self


class MathEvalConfig(EvalSource):
    data_dir: str | None = None  # only for ${data_dir} interpolation inside the YAML
    run_name: str | None = None  # default: the model directory's name
    output_dir: str
    generator: GeneratorConfig
    prompt: MathPrompt = Field(default_factory=MathPrompt)
    sampling: MathSampling = Field(default_factory=MathSampling)
    benchmarks: list[MathBenchmark] = Field(min_length=1)
    max_problems: int | None = Field(None, ge=1)  # first N of each benchmark (smoke runs)
    ks: list[int] | None = None  # default 1, 2, 4, ... n
    grading: GradingConfig = Field(default_factory=GradingConfig)
    shard: ShardConfig = Field(default_factory=ShardConfig)

    @model_validator(mode="after")
    def _ks_within_n(self) -> MathEvalConfig:
        names = [b.name for b in self.benchmarks]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark names must be unique, got {names}")
        if self.ks is not None and any(not 1 <= k <= self.sampling.n for k in self.ks):
            raise ValueError(f"ks must lie in 1..sampling.n={self.sampling.n}, got {self.ks}")
        return self


# ---------------------------------------------------------------------------------------------
# NoveltyBench: distinct and utility
# ---------------------------------------------------------------------------------------------

# NoveltyBench's cut-offs for Skywork-Reward-Gemma-2-27B-v0.2 raw rewards: rating = 1 + the
# number of cut-offs strictly below the reward (a reward equal to a cut-off takes the lower
# rating), so the 9 cut-offs make ratings 1..10.
SKYWORK_GEMMA2_27B_THRESHOLDS = (
    -7.71875,
    -6.28125,
    -6.0,
    -5.71875,
    -5.5,
    -5.0,
    -4.375,
    -3.4375,
    -2.046875,
)
NOVELTYBENCH_REWARD_MODEL = "Skywork/Skywork-Reward-Gemma-2-27B-v0.2"
# NoveltyBench's partition classifier (src/partition.py of novelty-bench/novelty-bench and of
# the DARLING fork): P(similar) = softmax[1] > 0.102. It ships no tokenizer; partition.py
# loads DeBERTa-v3-large's.
NOVELTYBENCH_CLASSIFIER = "yimingzhang/deberta-v3-large-generation-similarity"
NOVELTYBENCH_TOKENIZER = "microsoft/deberta-v3-large"
NOVELTYBENCH_THRESHOLD = 0.102
NoveltyBenchMode = Literal["upstream", "darling"]
# Tokens of each response in the classifier's pair input: upstream partition.py's
# `max_length=128`, the DARLING fork's `max_length=512`.
NOVELTYBENCH_SIDE_TOKENS: dict[str, int] = {"upstream": 128, "darling": 512}


def is_noveltybench_classifier(model: str | None) -> bool:
    """The hub name, or a local copy in a folder of the same name."""
    return model is not None and (
        model == NOVELTYBENCH_CLASSIFIER
        or model.rstrip("/").rsplit("/", 1)[-1] == NOVELTYBENCH_CLASSIFIER.split("/")[1]
    )


class RewardModelConfig(Strict):
    """The scalar reward model whose scores become 1..10 ratings."""

    model: str = NOVELTYBENCH_REWARD_MODEL
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    batch_size: int = Field(8, ge=1)
    max_length: int = Field(4096, ge=16)  # tokens of prompt + response, truncated
    device_map: str | None = "auto"  # None: load on CPU
    thresholds: list[float] = Field(default_factory=lambda: list(SKYWORK_GEMMA2_27B_THRESHOLDS))

    @field_validator("thresholds")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if len(v) != 9 or any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError(f"need 9 strictly increasing cut-offs (ratings 1..10), got {v}")
        return v


class PromptFileEvalConfig(EvalSource):
    """The keys every eval that reads its prompts from one JSONL file starts with."""

    data_dir: str | None = None  # only for ${data_dir} interpolation inside the YAML
    run_name: str | None = None
    output_dir: str
    # JSONL with `id` and `prompt` (NoveltyBench: its curated.jsonl / wildchat-1k)
    prompts: str
    prompt_key: str = "prompt"
    id_key: str = "id"
    max_prompts: int | None = Field(None, ge=1)


class NoveltyBenchPrompt(PromptConfig):
    template: str = "{prompt}"


class NoveltyBenchSampling(SamplingConfig):
    # NoveltyBench: 10 independent generations, temperature 1, at most 512 new tokens.
    n: int = Field(10, ge=2)
    temperature: float = Field(1.0, ge=0.0)
    max_new_tokens: int = Field(512, ge=1)


class NoveltyBenchConfig(PromptFileEvalConfig):
    stage: Literal["all", "generate", "score"] = "all"  # GPU jobs: generate, then score
    # Which NoveltyBench (docs/noveltybench-modes.md). Both partition greedily with the judge
    # below and record both utilities; they differ in the classifier's pair input and in
    # the utility to compare:
    #   upstream  as the public leaderboard runs it (novelty-bench/novelty-bench): each
    #             response cut to its first 128 tokens; compare `utility` (patience 0.8)
    #   darling   the DARLING paper's fork (its evals/novelty-bench): 512 tokens per
    #             response; compare `utility_darling` with the paper
    mode: NoveltyBenchMode = "upstream"
    generator: GeneratorConfig
    prompt: NoveltyBenchPrompt = Field(default_factory=NoveltyBenchPrompt)
    sampling: NoveltyBenchSampling = Field(default_factory=NoveltyBenchSampling)
    # NoveltyBench's DeBERTa-v3-large classifier at 0.102 (from the hub). Any other judge
    # stands in, e.g. judge={kind: embedding} offline, and the summary says so.
    judge: JudgeConfig = Field(
        default_factory=lambda: CrossEncoderJudgeConfig(
            model=NOVELTYBENCH_CLASSIFIER, threshold=NOVELTYBENCH_THRESHOLD
        )
    )
    # A cross_encoder judge's input. "noveltybench": NoveltyBench's partition.py encoding,
    # [CLS] a [SEP] b [SEP] built from token ids, each response cut to its first 128
    # (upstream) or 512 (darling) tokens, segment ids 0 up to the first [SEP] and 1 after,
    # P(similar) = softmax[1]. "judge_template": the judge's own text template, as in
    # training (`judge.template`, `judge.max_length`).
    pair_input: Literal["noveltybench", "judge_template"] = "noveltybench"
    # Tokenizer of the cross_encoder classifier; None: microsoft/deberta-v3-large for
    # NoveltyBench's classifier by its hub name (it ships none; partition.py loads that one),
    # else the checkpoint's own (a local copy: put the tokenizer beside it, or set this).
    pair_tokenizer: str | None = None
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig)
    # Weights `utility` (NoveltyBench's); `utility_darling` (the DARLING paper's) has none.
    patience: float = Field(0.8, gt=0.0, le=1.0)
    chunk_prompts: int = Field(16, ge=1)  # prompts partitioned and scored per write

    @property
    def side_tokens(self) -> int:
        """Tokens of each response in NoveltyBench's pair input, by `mode`."""
        return NOVELTYBENCH_SIDE_TOKENS[self.mode]

    def pair_tokenizer_name(self) -> str | None:
        """The cross_encoder's tokenizer: `pair_tokenizer`, else DeBERTa-v3-large's for
        NoveltyBench's classifier named by its hub name, else None (the checkpoint's own)."""
        if self.pair_tokenizer is not None:
            return self.pair_tokenizer
        model = self.judge.model if isinstance(self.judge, CrossEncoderJudgeConfig) else None
        return NOVELTYBENCH_TOKENIZER if model == NOVELTYBENCH_CLASSIFIER else None


# ---------------------------------------------------------------------------------------------
# Creative writing: rubric judge (and pairwise Elo) over an OpenAI-compatible endpoint
# ---------------------------------------------------------------------------------------------


class EndpointConfig(Strict):
    """An OpenAI-compatible server (vLLM, SGLang, a hosted API)."""

    base_url: str  # up to and including /v1, e.g. http://127.0.0.1:8000/v1
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"  # name of the variable holding the key
    temperature: float = Field(0.0, ge=0.0)
    max_tokens: int = Field(2048, ge=1)
    timeout_s: float = Field(180.0, gt=0.0)
    max_attempts: int = Field(4, ge=1)  # per item: HTTP errors and unparsable replies
    backoff_s: float = Field(2.0, ge=0.0)  # waits backoff_s * 2^attempt between attempts
    concurrency: int = Field(16, ge=1)


class RubricConfig(Strict):
    """Criteria scored 0..score_max; negative ones ("lower is better") are inverted."""

    criteria: list[str] = Field(
        default_factory=lambda: [
            "Adherence to the prompt",
            "Originality",
            "Character depth",
            "Imagery",
            "Prose quality",
            "Coherence",
            "Emotional engagement",
            "Clichés",
            "Purple prose",
            "Overall impression",
        ],
        min_length=1,
    )
    negative_criteria: list[str] = Field(default_factory=lambda: ["Clichés", "Purple prose"])
    score_max: float = Field(20.0, gt=0.0)
    min_parsed_fraction: float = Field(0.8, gt=0.0, le=1.0)  # else the reply is malformed
    prompt_file: str | None = None  # a template with {writing_prompt} {response} {criteria}

    @model_validator(mode="after")
    def _negatives_are_criteria(self) -> RubricConfig:
        unknown = [c for c in self.negative_criteria if c not in self.criteria]
        if unknown:
            raise ValueError(f"negative_criteria not among criteria: {unknown}")
        return self


class PairwiseConfig(Strict):
    """Pairwise comparisons against other runs' creative evaluations, fitted to Elo."""

    enabled: bool = False
    opponents: list[str] = Field(default_factory=list)  # output_dir of other creative runs
    both_orders: bool = True  # judge A-vs-B and B-vs-A (cancels position bias)
    criteria: list[str] = Field(
        default_factory=lambda: [
            "Originality",
            "Character authenticity",
            "Prose quality",
            "Coherence",
            "Instruction following",
            "Avoids clichés",
        ],
        min_length=1,
    )
    elo_scale: float = Field(400.0, gt=0.0)
    elo_mean: float = 1000.0  # ratings are shifted so their mean is this
    prior_games: float = Field(1.0, ge=0.0)  # virtual draws per pair: keeps ratings finite


class CreativeSampling(SamplingConfig):
    n: int = Field(3, ge=1)  # pieces per prompt (EQ-Bench: 3 iterations)
    temperature: float = Field(0.7, ge=0.0)
    max_new_tokens: int = Field(4096, ge=1)


class CreativeEvalConfig(PromptFileEvalConfig):
    generator: GeneratorConfig
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    sampling: CreativeSampling = Field(default_factory=CreativeSampling)
    judge: EndpointConfig
    rubric: RubricConfig = Field(default_factory=RubricConfig)
    pairwise: PairwiseConfig = Field(default_factory=PairwiseConfig)
    retry_failed: bool = True  # on resume, judge again the items that failed last time
