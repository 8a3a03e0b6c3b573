"""YAML configs with `defaults:` inheritance and strict Hydra-style `a.b=c` overrides.

The format is NeMo-RL's (a `defaults:` key naming the parent file(s), later files win,
`${...}` interpolation), so one loader serves the single-node and the NeMo-RL recipes and
CI can load every file in conf/ without NeMo-RL installed.

    cfg = load_config("conf/grpo_math_qwen3_4b.yaml", ["grpo.num_prompts_per_step=8"])

Overrides are strict: `a.b=c` fails unless key a.b exists (`+a.b=c` adds it, `~a.b`
deletes it). Values are parsed as YAML (`x=1e-6` is a float, `x=[1,2]` a list).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from darling_nemo.schema import ConfigError


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, with YAML 1.2 floats: `1e-6` is a float (as in OmegaConf,
    which NeMo-RL uses), not the string PyYAML's YAML 1.1 rules make of it."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    try:
        data = _parse_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: invalid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_yaml_with_defaults(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read one YAML file, merged over its `defaults:` parents (paths relative to it)."""
    path = Path(path).resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise ConfigError(f"defaults cycle: {chain}")
    data = _read_yaml(path)
    parents = data.pop("defaults", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(f"{path}: `defaults` must be a file name or a list of file names")
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = _deep_merge(merged, load_yaml_with_defaults(path.parent / parent, (*_seen, path)))
    return _deep_merge(merged, data)


def apply_overrides(cfg: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply `a.b=c`, `+a.b=c` and `~a.b` in order; unknown keys are errors."""
    out = _deep_merge({}, cfg)
    for item in overrides:
        delete = item.startswith("~")
        add = item.startswith("+")
        body = item[1:] if (add or delete) else item
        if delete:
            key, value_text = body, None
        elif "=" not in body:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        else:
            key, value_text = body.split("=", 1)
        parts = key.strip().split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None and add:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(
                    f"override {item!r}: no section {where!r} in the config"
                    + ("" if add else " (use +key=value to add a new key)")
                )
            node[part] = child = dict(child)
            node = child
        leaf = parts[-1]
        if delete:
            if leaf not in node:
                raise ConfigError(f"override {item!r}: key {key!r} does not exist")
            del node[leaf]
            continue
        if leaf not in node and not add:
            raise ConfigError(
                f"override {item!r}: unknown key {key!r} (use +{key}=... to add a new key)"
            )
        try:
            node[leaf] = _parse_yaml(value_text) if value_text != "" else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"override {item!r}: value is not valid YAML: {err}") from None
    return out


def resolve(cfg: dict[str, Any]) -> dict[str, Any]:
    """Resolve `${a.b}` interpolations (and NeMo-RL's `${mul:a,b}`) into plain values."""
    if not OmegaConf.has_resolver("mul"):
        OmegaConf.register_new_resolver("mul", lambda a, b: a * b)
    try:
        return OmegaConf.to_container(OmegaConf.create(cfg), resolve=True)  # type: ignore[return-value]
    except Exception as err:  # omegaconf raises several error types, all with the key path
        raise ConfigError(f"cannot resolve interpolation: {err}") from None


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """File + defaults chain + overrides, interpolations resolved, as plain dicts."""
    return resolve(apply_overrides(load_yaml_with_defaults(path), overrides))


def save_config(cfg: dict[str, Any], path: str | Path) -> None:
    """Write the resolved config next to a run's outputs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
