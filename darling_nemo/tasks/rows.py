"""What the shipped tasks share below both engines: reading a task's JSONL rows and their
columns (ConfigErrors naming the file:line and the key), a TRL completion's text, and a tiny
policy's word vocabulary. Torch-free."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from darling_nemo.jsonl import read_jsonl_numbered
from darling_nemo.schema import (
    ChatTaskConfig,
    ConfigError,
    MathTaskConfig,
    RewardFuncsTaskConfig,
)


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The text of a TRL completion (or prompt): a string, or a conversational list of
    messages (TRL's completions then are [{"role": "assistant", "content": text}]); content
    given as parts ([{"type": "text", "text": ...}]) contributes its text parts."""
    if isinstance(completion, str):
        return completion
    texts = []
    for message in completion:
        content = message.get("content") or ""
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(str(part.get("text", "")) for part in content)
    return "".join(texts)


def column(
    rows: Sequence[Mapping[str, Any]],
    lines: Sequence[int],
    key: str,
    path: str,
    config_key: str,
    accepts: Callable[[Any], bool] = lambda value: isinstance(value, str),
    wanted: str = "a string",
) -> list[Any]:
    """rows[i][key] for every row; a missing key, or a value `accepts` refuses (a number or
    null for a question), is a ConfigError naming the file:line, the key and its type."""
    values = []
    for line, row in zip(lines, rows, strict=True):
        if key not in row:
            raise ConfigError(
                f"{path}:{line}: no {key!r} (set {config_key} to one of {sorted(row)})"
            )
        if not accepts(row[key]):
            raise ConfigError(
                f"{path}:{line}: {key!r} is {json_type(row[key])} ({row[key]!r:.40}), "
                f"not {wanted} ({config_key})"
            )
        values.append(row[key])
    return values


def json_type(value: Any) -> str:
    """A JSON value's type as JSON names it (what the user wrote in the file)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value), "a value")


def is_answer(value: Any) -> bool:
    """A math answer: text, or a number (a dataset may store 70 for "70")."""
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


def is_chat_prompt(value: Any) -> bool:
    """A chat prompt: text, or a conversation of {"role": str, "content": str} turns."""
    if isinstance(value, str):
        return True
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(
            isinstance(turn, dict)
            and isinstance(turn.get("role"), str)
            and isinstance(turn.get("content"), str)
            for turn in value
        )
    )


def task_rows(
    task: MathTaskConfig | ChatTaskConfig | RewardFuncsTaskConfig,
) -> tuple[list[dict[str, Any]], list[int]]:
    """The first `max_prompts` rows of task.data_path and their line numbers; a missing or
    malformed file is a ConfigError naming the key and every bad line."""
    try:
        numbered = read_jsonl_numbered(task.data_path)[: task.max_prompts]
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"task.data_path: {err}") from None
    return [row for _, row in numbered], [line for line, _ in numbered]


def nonempty_task_rows(
    task: MathTaskConfig | ChatTaskConfig | RewardFuncsTaskConfig,
) -> tuple[list[dict[str, Any]], list[int]]:
    """`task_rows`, where a file without rows is a ConfigError (nothing to train on)."""
    raw, lines = task_rows(task)
    if not raw:
        raise ConfigError(f"task.data_path: {task.data_path} has no rows: nothing to train on")
    return raw, lines


CHAT_PROMPT = 'a string or a list of {"role": ..., "content": ...} turns'


def chat_prompt_column(
    raw: list[dict[str, Any]], lines: list[int], task: ChatTaskConfig | RewardFuncsTaskConfig
) -> list[Any]:
    """Each row's task.prompt_key: a string or a conversation (ConfigError naming the line)."""
    return column(
        raw, lines, task.prompt_key, task.data_path, "task.prompt_key", is_chat_prompt, CHAT_PROMPT
    )


def prompt_words(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The whitespace words of the rows' prompts, sorted: a tiny policy's vocabulary. A random
    tiny policy then writes words, not characters (a character tokenizer rarely samples a
    space, so its responses were one or two "words", settled by the short-answer rule before
    any judge was asked): the smoke runs exercise the configured judge."""
    return sorted({word for row in rows for word in str(row["prompt"]).split()})
