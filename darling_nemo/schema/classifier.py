"""The pair classifier's own programs: training it and serving it.

Read by recipes/train_classifier.py (`ClassifierTrainConfig`) and
`darling-serve-classifiers` (`ClassifierServersConfig`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from darling_nemo.schema.base import Strict
from darling_nemo.schema.judges import TemplateName, Truncation


class ClassifierServersConfig(Strict):
    """`darling-serve-classifiers`: one `vllm serve MODEL --task classify` per GPU of a node.

    Server k runs on GPU gpus[k] (CUDA_VISIBLE_DEVICES), port base_port + k, model name
    f"{served_model_name_prefix}{k}" (the reference layout: 8 GPUs, 8000-8007,
    similarity_gpu_k).
    """

    model: str = "dogtooth/similarity-classifier-f168-hf"
    gpus: list[int] = Field(default_factory=lambda: list(range(8)), min_length=1)
    base_port: int = Field(8000, ge=1, le=65535)
    # where the servers listen; None: this machine's address (its hostname's, which the
    # driver reaches), not every interface; "0.0.0.0" only where a site asks for it
    host: str | None = None
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
    # cross-validation: held out = fold cv_fold of cv_folds, whole split_key groups dealt to
    # folds as the calibrated judge's benchmark deals them (heldout_fraction then unused)
    cv_folds: int | None = Field(None, ge=2)
    cv_fold: int = Field(0, ge=0)
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

    @model_validator(mode="after")
    def _fold_exists(self) -> ClassifierTrainConfig:
        if self.cv_folds is not None and self.cv_fold >= self.cv_folds:
            raise ValueError(f"cv_fold={self.cv_fold} must be < cv_folds={self.cv_folds}")
        return self
