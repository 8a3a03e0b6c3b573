"""What every config model shares: strict models and errors that name the key path.

Unknown keys are errors whose message carries the key path (pydantic `extra="forbid"`), so
a typo never trains the wrong run. Call sites read attributes of the validated model, never
`cfg.get(key, default)`: every default lives in one schema module, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from darling_nemo.validation_messages import describe_error


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def format_validation_error(
    err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """All problems at once (`config_problems`), one line each: the dotted key path and the
    problem in plain words (`darling.judge.kind: 'bogus' is not one of lexical, cross_encoder, ...`).

    With `model` (the class validated) pydantic's union tags leave the key paths, closed
    sets list their values and an unknown key is answered with the closest known one.
    """
    return config_problems([describe_error(e, prefix, model) for e in err.errors()])


def config_problems(problems: Sequence[str]) -> str:
    """The message of one or more config problems (`key.path: what is wrong`): one problem
    is one line; several are `invalid config:` and one indented line each, all at once."""
    if len(problems) == 1:
        return problems[0]
    return "invalid config:\n" + "\n".join(f"  {line}" for line in problems)


class ConfigError(ValueError):
    """A config problem, with the key path(s) in the message."""


def validate_section(model: type[Strict], section: dict[str, Any], prefix: str = "") -> Any:
    """Validate any config model; raise ConfigError naming every bad key path."""
    try:
        return model.model_validate(section)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix, model)) from None
