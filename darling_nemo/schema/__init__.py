"""The typed configs, one module per reader; every default lives here, once.

base.py        strict models, `ConfigError`, `config_problems`, `format_validation_error`,
               `validate_section`
judges.py      the pair judges (`darling.judge`) and the reference pair templates
darling.py     the `darling:` section, read by both engines
trl.py         the TRL engine's run and the CPU miniature (one shared base)
classifier.py  training and serving the pair classifier

The evaluations' configs are darling_nemo/evals/schema.py, beside their only readers.
Every name is importable from `darling_nemo.schema`.
"""

from darling_nemo.schema.base import (
    ConfigError,
    Strict,
    config_problems,
    format_validation_error,
    validate_section,
)
from darling_nemo.schema.classifier import ClassifierServersConfig, ClassifierTrainConfig
from darling_nemo.schema.darling import (
    DarlingConfig,
    group_size_problem,
    inputs_problem,
    validate_darling,
)
from darling_nemo.schema.judges import (
    PAIR_TEMPLATES,
    CrossEncoderJudgeConfig,
    EmbeddingJudgeConfig,
    FallbackJudgeConfig,
    JudgeConfig,
    LexicalJudgeConfig,
    NodeServerConfig,
    PairTemplate,
    RayPoolJudgeConfig,
    ServedEndpoint,
    ServedJudgeConfig,
    TemplateName,
    Truncation,
)
from darling_nemo.schema.trl import (
    ChatQualityConfig,
    ChatTaskConfig,
    DigitSumTaskConfig,
    EvaluationConfig,
    LatticeRoutesTaskConfig,
    LengthStandInQualityConfig,
    MathTaskConfig,
    MiniConfig,
    PolicyConfig,
    PretrainedPolicyConfig,
    RewardFuncsTaskConfig,
    RewardModelQualityConfig,
    TaskConfig,
    TaskSection,
    TinyPolicyConfig,
    TrlLoggingConfig,
    TrlRunConfig,
    TrlSharedConfig,
    TrlTrainerConfig,
    WarmStartConfig,
)

__all__ = [
    "PAIR_TEMPLATES",
    "ChatQualityConfig",
    "ChatTaskConfig",
    "ClassifierServersConfig",
    "ClassifierTrainConfig",
    "ConfigError",
    "CrossEncoderJudgeConfig",
    "DarlingConfig",
    "DigitSumTaskConfig",
    "EmbeddingJudgeConfig",
    "EvaluationConfig",
    "FallbackJudgeConfig",
    "JudgeConfig",
    "LatticeRoutesTaskConfig",
    "LengthStandInQualityConfig",
    "LexicalJudgeConfig",
    "MathTaskConfig",
    "MiniConfig",
    "NodeServerConfig",
    "PairTemplate",
    "PolicyConfig",
    "PretrainedPolicyConfig",
    "RayPoolJudgeConfig",
    "RewardFuncsTaskConfig",
    "RewardModelQualityConfig",
    "ServedEndpoint",
    "ServedJudgeConfig",
    "Strict",
    "TaskConfig",
    "TaskSection",
    "TemplateName",
    "TinyPolicyConfig",
    "TrlLoggingConfig",
    "TrlRunConfig",
    "TrlSharedConfig",
    "TrlTrainerConfig",
    "Truncation",
    "WarmStartConfig",
    "config_problems",
    "format_validation_error",
    "group_size_problem",
    "inputs_problem",
    "validate_darling",
    "validate_section",
]
