"""YAML configs with `defaults:` inheritance and strict Hydra-style `a.b=c` overrides.

The format is NeMo-RL's (a `defaults:` key naming the parent file(s), later files win,
`${...}` interpolation), so one loader serves the single-node and the NeMo-RL recipes and
CI can load every file in conf/ without NeMo-RL installed.

    cfg = load_config("conf/grpo_math_qwen3_4b.yaml", ["grpo.num_prompts_per_step=8"])

Overrides are strict: `a.b=c` fails unless the config has key a.b or its schema knows it;
a typo is answered with the closest known key. `+a.b=c` adds a key where a section takes
keys no schema lists (NeMo-RL's own sections), `~a.b` deletes one. Values are parsed as
YAML (`x=1e-6` is a float, `x=[1,2]` a list).

Commands end on a bad config through one path (`exits_on_config_error`): `prog: message`
on stderr, naming the file:line or key path, and exit code 2.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import yaml
from omegaconf import OmegaConf
from pydantic import BaseModel

from darling_nemo import run_folder
from darling_nemo.console import close_bars
from darling_nemo.interrupt import how_interrupted, started
from darling_nemo.schema import (
    ConfigError,
    DarlingConfig,
    MiniConfig,
    TrlRunConfig,
    validate_section,
)
from darling_nemo.schema_keys import FREE, KeySpace, Slot, child_slot, key_space, sections_space

P = ParamSpec("P")
Model = TypeVar("Model", bound=BaseModel)


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


# Where a `defaults:` entry is looked for after the folder of the file naming it: the
# package's conf/ (the checkout's, or the image's /opt/darling-nemo), so a config copied out
# of conf/ (docs/your-own-task.md) still finds base/common.yaml.
PACKAGE_CONF = Path(__file__).resolve().parent.parent / "conf"


def find_parent(child: Path, parent: str) -> Path:
    """The file a `defaults:` entry of `child` names: beside `child`, else under the package's
    conf/; a ConfigError names every place it looked."""
    places = [child.parent / parent]
    if not Path(parent).is_absolute() and PACKAGE_CONF.resolve() != child.parent.resolve():
        places.append(PACKAGE_CONF / parent)
    for place in places:
        if place.is_file():
            return place
    looked = ", ".join(str(place) for place in places)
    raise ConfigError(f"{child}: defaults entry {parent!r} not found (looked in {looked})")


def load_yaml_with_defaults(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read one YAML file, merged over its `defaults:` parents (each beside it, else under the
    package's conf/: `find_parent`)."""
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
        merged = _deep_merge(
            merged, load_yaml_with_defaults(find_parent(path, parent), (*_seen, path))
        )
    return _deep_merge(merged, data)


Schema = type[BaseModel] | Mapping[str, type[BaseModel]]


def infer_schema(cfg: Mapping[str, Any]) -> Schema | None:
    """The schema a loaded config declares by itself: an `engine: trl` config is a
    TrlRunConfig, one with `arms:` (a darling: section per arm) the miniature's MiniConfig;
    in any other config with a `darling:` section (NeMo-RL's) that section is a
    DarlingConfig and the rest is NeMo-RL's own (checked against conf/base/common.yaml).
    Commands that know their schema pass it instead."""
    if cfg.get("engine") == "trl":
        return TrlRunConfig
    if isinstance(cfg.get("arms"), dict):
        return MiniConfig
    if isinstance(cfg.get("darling"), dict):
        return {"darling": DarlingConfig}
    return None


def _root_space(schema: Schema | None) -> KeySpace:
    if schema is None:
        return FREE
    if isinstance(schema, Mapping):
        return sections_space(schema)
    return key_space(Slot(schema))


def _unknown_key(
    item: str, path: list[str], space: KeySpace, node: Mapping[str, Any], full_key: str
) -> str:
    """`override ...: unknown key 'a.b'; did you mean 'a.c'?`, and `+` only where a section
    takes keys its schema does not list (NeMo-RL's own sections, `dict` fields)."""
    where, key = ".".join(path), path[-1]
    candidates = sorted(set(node) | set(space.known))
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    message = f"override {item!r}: unknown key {where!r}"
    if close:
        message += f"; did you mean {'.'.join([*path[:-1], close[0]])!r}?"
    elif candidates and not space.open:
        section = ".".join(path[:-1]) or "the top level"
        message += f" ({section} has: {', '.join(candidates)})"
    if space.open:
        message += f" (to add a new key: +{full_key}=...)"
    return message


def apply_overrides(
    cfg: dict[str, Any], overrides: Sequence[str], schema: Schema | None = None
) -> dict[str, Any]:
    """Apply `a.b=c`, `+a.b=c` and `~a.b` in order; unknown keys are errors.

    A key is known when the config has it or `schema` declares it (a pydantic model for the
    whole config, or {section: model} for the sections that have one), so a schema default
    the YAML does not spell out can be overridden without `+`.
    """
    out = _deep_merge({}, cfg)
    root = _root_space(schema)
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
        node, space = out, root
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None and (add or part in space.known):
                slot = child_slot(space, part)
                child = node[part] = dict(key_space(slot).seed)
            elif part not in node:
                raise ConfigError(_unknown_key(item, parts[: depth + 1], space, node, key))
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                shown = "null" if child is None else "a value"
                raise ConfigError(
                    f"override {item!r}: {where!r} is {shown}, not a section"
                    + (f" (+{key}=... makes it one)" if child is None and space.open else "")
                )
            node[part] = child = dict(child)
            space = key_space(child_slot(space, part), child)
            node = child
        leaf = parts[-1]
        if delete:
            if leaf not in node:
                raise ConfigError(f"override {item!r}: key {key!r} does not exist")
            del node[leaf]
            continue
        if leaf not in node and not add and leaf not in space.known:
            raise ConfigError(_unknown_key(item, parts, space, node, key))
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


def load_config(
    path: str | Path, overrides: Sequence[str] = (), schema: Schema | None = None
) -> dict[str, Any]:
    """File + defaults chain + overrides, interpolations resolved, as plain dicts.

    Overrides may set any key the config has or its schema knows (`schema`, else the one
    the file declares: `infer_schema`).
    """
    raw = load_yaml_with_defaults(path)
    return resolve(apply_overrides(raw, overrides, schema or infer_schema(raw)))


def load_validated(
    path: str | Path | None, overrides: Sequence[str], schema: type[Model]
) -> tuple[Model, dict[str, Any]]:
    """(validated model, resolved config dict) of a config file (None: the schema's
    defaults) plus overrides; raises ConfigError naming the file, line or key path."""
    raw = (
        load_config(path, overrides, schema)
        if path
        else resolve(apply_overrides({}, overrides, schema))
    )
    try:
        return validate_section(schema, raw), raw
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}" if path else str(err)) from None


CONFIG_ERROR_EXIT_CODE = 2  # argparse's code for a bad command line
INTERRUPTED_EXIT_CODE = 130  # the shell's code for a command ended by Ctrl-C (128 + SIGINT)


def report_error(prog: str, err: BaseException | str) -> int:
    """The one way a command ends on a bad config or input: `prog: message` on stderr (the
    message names the file:line or key path), no traceback; returns the exit code, 2. A
    progress bar still open (a run stopped in training) ends its line first."""
    close_bars()
    print(f"{prog}: {err}", file=sys.stderr, flush=True)
    return CONFIG_ERROR_EXIT_CODE


def report_interrupt(prog: str, saved: str) -> int:
    """The one way a command ends on Ctrl-C or SIGTERM (called where their KeyboardInterrupt
    is caught): one line saying what is kept, exit code 130 (Ctrl-C) or 143 (SIGTERM,
    `interrupt.Terminated`). Progress bars still open are closed first: otherwise they
    redraw at exit, after it."""
    close_bars()
    how, code = how_interrupted(sys.exc_info()[1])
    print(f"\n{prog}: interrupted ({how}); {saved}", file=sys.stderr, flush=True)
    return code


NOTHING_TO_RESUME = "nothing of this command is resumable: run it again to start over"
RESUMES = (
    "what finished is saved in the output folder (records, checkpoints); "
    "the same command resumes from it"
)


def exits_on_config_error(
    prog: str, *also: type[Exception], on_interrupt: str = NOTHING_TO_RESUME
) -> Callable[[Callable[P, int | None]], Callable[P, int]]:
    """Decorate a command's `main`: a ConfigError (or one of `also`, e.g. a data error)
    raised anywhere in it ends the command through `report_error` (exit code 2); Ctrl-C
    through `report_interrupt` (exit code 130) with `on_interrupt` saying what is kept.

        @exits_on_config_error("eval_math")
        def main(argv: list[str] | None = None) -> int: ...
        sys.exit(main())
    """
    caught = (ConfigError, *also)

    def decorate(main: Callable[P, int | None]) -> Callable[P, int]:
        @functools.wraps(main)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
            started()  # Ctrl-C from here on: KeyboardInterrupt, reported below
            try:
                return main(*args, **kwargs) or 0
            except caught as err:
                return report_error(prog, err)
            except KeyboardInterrupt:
                return report_interrupt(prog, on_interrupt)
            except (OSError, RuntimeError) as err:
                if not run_folder.disk_full(err):
                    raise
                return report_error(prog, disk_full_line(err, on_interrupt))
            finally:  # the output folder's run lock (`parse_config(save=True)`)
                run_folder.release_all()

        return wrapper

    return decorate


def disk_full_line(err: BaseException, kept: str) -> str:
    """A write that found no space, where the command does not know which checkpoint it
    was: the file (when the error names one) and what is kept."""
    where = f" writing {err.filename}" if getattr(err, "filename", None) else ""
    return f"disk full{where} ({str(err).splitlines()[0]}): free some space; {kept}"


# Inputs only the machine at hand can check (folders and files a command reads or writes): each
# a ConfigError naming the key, raised before anything is written.


def _writable_folder(path: Path, key: str) -> None:
    """`path` (a folder to be, or an existing one) can be made and written here."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None:  # nothing of it exists, not even its root: mkdir says why
        return
    if not existing.is_dir():
        what = "is" if existing == path else f"lies under {existing}, which is"
        raise ConfigError(f"{key}: {path} {what} a file, not a folder: choose another path")
    # Permission bits do not tell (root writes past them, not on a read-only mount or /proc):
    # make a folder there and remove it at once.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".darling-write-check-", dir=existing))
    except OSError as err:
        raise ConfigError(
            f"{key}: cannot write in {existing} ({err.strerror or err}): choose another path"
        ) from None


def check_output_dir(path: str | Path, key: str = "output_dir") -> None:
    """A folder the command can write (it may not exist yet); a ConfigError naming `key` and
    the path otherwise (a file on the path, a folder that takes no new files)."""
    _writable_folder(Path(path).expanduser(), key)


def check_output_file(path: str | Path, key: str) -> None:
    """A file the command can write: not a folder, in a folder that can be made and written."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigError(f"{key}: {path} is a folder, not a file: name a file")
    existing = next((p for p in path.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(
            f"{key}: {path} lies under {existing}, which is a file, not a folder: "
            "choose another path"
        )
    _writable_folder(path.parent, key)


def looks_like_a_path(model: str) -> bool:
    """A model named as a path (/..., ./..., ../..., ~/..., or a/b/c: a hub name has one
    slash), which must then be a folder here: otherwise the hub would be asked for it and
    answer with a misleading 'Repo id must be in the form ...'."""
    return model.startswith(("/", "./", "../", "~")) or model.count("/") >= 2


def check_model_path(model: str | None, key: str) -> None:
    """A model written as a path is a folder here; a ConfigError naming `key` otherwise."""
    if model and looks_like_a_path(model) and not Path(model).expanduser().is_dir():
        raise ConfigError(
            f"{key}: no such model folder {model} (a local checkpoint must exist; a hub "
            "model is named org/name)"
        )


def whole_number(text: str) -> int:
    """An argparse `type` for counts and sizes: a whole number >= 1 (argparse then ends the
    command with exit code 2, naming the option)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def save_config(cfg: dict[str, Any], path: str | Path) -> None:
    """Write the resolved config next to a run's outputs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def example_epilog(doc: str, prog: str | None = None) -> str:
    """`example:` and the first command of a module docstring (its first indented line that
    starts with `prog`, else with `uv run` or `darling-`, with its `\\` continuation lines),
    for `--help`.
    (In a docstring that is not raw, Python has already joined `\\`-continued lines: the
    run of spaces left where a line break was is closed up.)"""
    lines = doc.splitlines()
    starts = [
        k
        for k, line in enumerate(lines)
        if line.startswith("    ") and line.strip().startswith(prog or ("uv run ", "darling-"))
    ]
    if not starts:
        raise ValueError("the docstring has no indented example command")
    command = []
    for line in lines[starts[0] :]:
        command.append("  " + " ".join(line.split()))
        if not line.rstrip().endswith("\\"):
            break
    return "example:\n" + "\n".join(command) + "\n"


def command_parser(
    doc: str, prog: str | None = None, description: str | None = None
) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first line and whose epilog is its
    example command (`example_epilog`; `prog`'s own when the docstring shows several)."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description or doc.strip().splitlines()[0],
        epilog=example_epilog(doc, prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def config_parser(doc: str, *, config_required: bool = True) -> argparse.ArgumentParser:
    """`command_parser` with `--config FILE` and strict `KEY=VALUE` overrides."""
    parser = command_parser(doc)
    parser.add_argument(
        "--config",
        required=config_required,
        help="YAML config" + ("" if config_required else " (default: the schema's defaults)"),
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override key.path=value (strict: a key of the file or of its schema)",
    )
    return parser


def parse_config(
    doc: str,
    argv: Sequence[str] | None,
    schema: type[Model],
    *,
    config_required: bool = True,
    save: bool = False,
    resolve: Callable[[Model], Model] | None = None,
) -> Model:
    """A recipe's command line (`config_parser`: `--config FILE` and `KEY=VALUE` overrides)
    validated against `schema`; with `save`, the resolved config is written to
    `<output_dir>/config.yaml` beside the run's outputs, and the folder's run lock
    (`run_folder`) is held until the command ends: a second run into it stops, exit 2. Errors are ConfigErrors (see
    `exits_on_config_error`).

        cfg = parse_config(__doc__, argv, MathEvalConfig, save=True)
    """
    args = config_parser(doc, config_required=config_required).parse_args(argv)
    cfg, raw = load_validated(args.config, args.overrides, schema)
    if save:
        check_output_dir(cfg.output_dir)  # type: ignore[attr-defined]
        if Path(cfg.output_dir).is_dir():  # type: ignore[attr-defined]
            # One run per folder, held until the command ends (`exits_on_config_error`); a
            # new folder is locked once it is made, below, so a refused start leaves none.
            run_folder.acquire(cfg.output_dir)  # type: ignore[attr-defined]
    if resolve is not None:  # what only exists at run time (a model folder, a run's export)
        cfg = resolve(cfg)
    if save:  # only once every input is checked: a failed start leaves the folder as it was
        run_folder.acquire(cfg.output_dir)  # type: ignore[attr-defined]
        save_config(raw, Path(cfg.output_dir) / "config.yaml")
    return cfg
