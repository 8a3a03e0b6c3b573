"""What every config model shares: strict models and errors that name the key path.

Unknown keys are errors whose message carries the key path (pydantic `extra="forbid"`), so
a typo never trains the wrong run. Call sites read attributes of the validated model, never
`cfg.get(key, default)`: every default lives in one schema module, once. The registries
(judge kinds, tasks) make the configs accept what they hold through `use_union_members`;
the method registry through `schema.darling`, which rebuilds the models (`rebuild_models`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from darling_nemo.registries import PluginError, import_plugins
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


def import_configured_plugins(darling: object) -> None:
    """`darling.plugins` imported (they register what the config names), or a ConfigError
    naming the module and what its import raised."""
    try:
        import_plugins(darling)
    except PluginError as err:
        raise ConfigError(str(err)) from None


def validate_section(model: type[Strict], section: dict[str, Any], prefix: str = "") -> Any:
    """Validate any config model (a `darling:` section's plugins imported first); raise
    ConfigError naming every bad key path."""
    if "darling" in model.model_fields and isinstance(section, dict):
        import_configured_plugins(section.get("darling"))
    try:
        return model.model_validate(section)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix, model)) from None


_unions: dict[tuple[type, ...], tuple[type, ...]] = {}


def use_union_members(builtins: tuple[type, ...], members: tuple[type, ...]) -> None:
    """Make every field whose `kind`-picked union holds all of `builtins` hold exactly
    `members`: what a registry (judge kinds, tasks) calls when an entry is registered or
    removed, so the configs accept exactly the registered sections.

    Pydantic copies a section's validator into every model that holds it, so the models
    holding such a field are rebuilt, and then every model that holds those, sections
    before their holders.
    """
    if _unions.get(builtins, builtins) == members:
        return
    _unions[builtins] = members
    models = _models_by_dependency()
    for model in models:
        for info in model.model_fields.values():
            if info.discriminator == "kind" and set(builtins) <= set(get_args(info.annotation)):
                info.annotation = Union[members]  # noqa: UP007
    for model in models:
        model.model_rebuild(force=True)


def rebuild_models() -> None:
    """Rebuild every config model, sections before their holders: after a registry changed
    a section's fields (the method registry's keys, `schema.darling`)."""
    for model in _models_by_dependency():
        model.model_rebuild(force=True)


def union_members(builtins: tuple[type, ...]) -> tuple[type, ...]:
    """The members `use_union_members` last gave the unions that hold `builtins`."""
    return _unions.get(builtins, builtins)


def _models_by_dependency() -> list[type[BaseModel]]:
    """Every Strict model defined so far, each after the models its fields hold."""
    ordered: dict[type[BaseModel], None] = {}
    visiting: set[type[BaseModel]] = set()

    def held(tp: Any) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [model for arg in get_args(tp) for model in held(arg)]

    def visit(model: type[BaseModel]) -> None:
        if model in ordered or model in visiting:
            return
        visiting.add(model)
        for info in model.model_fields.values():
            for inner in held(info.annotation):
                visit(inner)
        ordered[model] = None

    stack = [Strict]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls is not Strict:
            visit(cls)
    return [model for model in ordered if issubclass(model, Strict)]
