"""Prompt files for the NeMo-RL recipes: local JSONL / JSON / parquet or a Hugging Face dataset
in, NeMo-RL v0.4.0 `ResponseDataset` JSONL out.

NeMo-RL reads the output with `data.dataset_name: ResponseDataset`, `input_key: input`,
`output_key: output`; `task_name` routes each row to the recipe's environment:

    {"input": "<problem>", "output": "<reference answer>", "task_name": "math", "id": "..."}
    {"input": "<prompt>",  "output": "",                   "task_name": "wildchat", "id": "..."}

    darling-prep-math agentica-org/DeepScaleR-Preview-Dataset --out data/math/train.jsonl
    darling-prep-math darling_nemo/resources/math_eval/{aime25,hmmt,brumo}.jsonl \
        --out data/math/val.jsonl
    darling-prep-wildchat allenai/WildChat-1M --out data/wildchat/train.jsonl \
        --shuffle-seed 0 --limit 10000

Field names are detected (problem/question/prompt, answer/expected_answer/final_answer,
prompt/conversation) or given with --problem-key/--answer-key/--prompt-key. Rows that lack a
field stop the run with the file and line. Exact duplicate prompts are dropped (first kept).
--tokenizer with --max-prompt-tokens drops prompts whose chat-templated length exceeds the
budget, as the reference's filter_overlong_prompts does (NeMo-RL itself would keep them
with loss_multiplier 0).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from darling_nemo import tasks
from darling_nemo.config import (
    check_output_file,
    command_parser,
    exits_on_config_error,
    whole_number,
)
from darling_nemo.jsonl import read_json, read_jsonl_numbered
from darling_nemo.resume import write_text_atomically

PROBLEM_KEYS = ("problem", "question", "prompt", "input")
ANSWER_KEYS = ("expected_answer", "answer", "final_answer", "output")
PROMPT_KEYS = ("prompt", "conversation", "messages", "input", "instruction")


class DataError(ValueError):
    """Bad input data, with the file/dataset and line in the message."""


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read_records(source: str, split: str = "train") -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) for every row of a local .jsonl/.json/.parquet file or a hub dataset.

    `where` is "path:line" (JSONL), "path[row]" (JSON list, parquet) or "name[split][row]".
    """
    path = Path(source)
    if path.suffix == ".jsonl":
        try:
            records = read_jsonl_numbered(path)
        except (FileNotFoundError, ValueError) as err:
            raise DataError(str(err)) from None
        for line_no, record in records:
            yield f"{path}:{line_no}", record
    elif path.suffix == ".json":
        try:
            data = read_json(path)
        except (FileNotFoundError, ValueError) as err:
            raise DataError(str(err)) from None
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of objects")
        for row, record in enumerate(data):
            yield f"{path}[{row}]", record
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for row, record in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}[{row}]", record
    elif path.exists():
        raise DataError(f"{path}: unsupported file type (use .jsonl, .json or .parquet)")
    else:
        from datasets import load_dataset

        for row, record in enumerate(load_dataset(source, split=split)):
            yield f"{source}[{split}][{row}]", dict(record)


def _pick_key(record: dict[str, Any], candidates: Sequence[str], where: str, what: str) -> str:
    for key in candidates:
        if record.get(key) not in (None, ""):
            return key
    raise DataError(
        f"{where}: no {what} field (looked for {', '.join(candidates)}; "
        f"the row has {', '.join(record) or 'no fields'}); name it with --{what}-key"
    )


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str | int | float) or str(value).strip() == "":
        raise DataError(f"{where}: field {key!r} is empty or not text: {value!r}")
    return str(value).strip()


def _first_user_turn(value: Any, where: str, key: str) -> str:
    """A prompt given as a string, or as a chat (list of {role, content}): its first user turn."""
    if isinstance(value, list):
        for message in value:
            if isinstance(message, dict) and message.get("role") == "user":
                return _text(message.get("content"), where, f"{key}[user].content")
        raise DataError(f"{where}: field {key!r} is a chat without a user turn")
    return _text(value, where, key)


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------


def math_row(
    where: str,
    record: dict[str, Any],
    problem_key: str | None,
    answer_key: str | None,
    task_name: str,
) -> dict[str, str]:
    """One math row. A non-empty `context` field (OlympiadBench) is put before the problem;
    `$...$` around an answer is removed (NeMo-RL wraps the answer in \\boxed{} to verify)."""
    pk = problem_key or _pick_key(record, PROBLEM_KEYS, where, "problem")
    ak = answer_key or _pick_key(record, ANSWER_KEYS, where, "answer")
    for key in (pk, ak):
        if key not in record:
            raise DataError(f"{where}: no field {key!r} (the row has {', '.join(record)})")
    problem = _text(record[pk], where, pk)
    context = record.get("context")
    if isinstance(context, str) and context.strip():
        problem = f"{context.strip()}\n\n{problem}"
    value = record[ak]
    parts = value if isinstance(value, list) else [value]
    answer = ", ".join(_unwrap_dollars(_text(v, where, ak)) for v in parts)
    return {
        "input": problem,
        "output": answer,
        "task_name": task_name,
        "id": _row_id(record, where),
    }


def _unwrap_dollars(answer: str) -> str:
    """`$x$` -> `x` (one math span only; `$a$, $b$` is left alone)."""
    if len(answer) > 2 and answer[0] == answer[-1] == "$" and "$" not in answer[1:-1]:
        return answer[1:-1].strip()
    return answer


def chat_row(
    where: str, record: dict[str, Any], prompt_key: str | None, task_name: str
) -> dict[str, str]:
    """One chat-prompt row (no reference answer)."""
    key = prompt_key or _pick_key(record, PROMPT_KEYS, where, "prompt")
    if key not in record:
        raise DataError(f"{where}: no field {key!r} (the row has {', '.join(record)})")
    prompt = _first_user_turn(record[key], where, key)
    return {"input": prompt, "output": "", "task_name": task_name, "id": _row_id(record, where)}


def _row_id(record: dict[str, Any], where: str) -> str:
    for key in ("id", "conversation_hash", "unique_id", "idx"):
        if record.get(key) is not None:
            return str(record[key])
    return where


def dedupe(rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], int]:
    """Drop rows whose `input` repeats an earlier row's; (kept rows, number dropped)."""
    seen: set[str] = set()
    kept = []
    for row in rows:
        if row["input"] not in seen:
            seen.add(row["input"])
            kept.append(row)
    return kept, len(rows) - len(kept)


def drop_long_prompts(
    rows: list[dict[str, str]],
    tokenizer_name: str,
    max_tokens: int,
    prompt_template: str | None,
) -> tuple[list[dict[str, str]], int]:
    """Drop rows whose prompt, rendered as the recipe renders it (the prompt file's template,
    the tokenizer's chat template with a generation prompt), exceeds max_tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    kept = []
    for row in rows:
        text = prompt_template.format(row["input"]) if prompt_template else row["input"]
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        if len(tokenizer(rendered, add_special_tokens=False)["input_ids"]) <= max_tokens:
            kept.append(row)
    return kept, len(rows) - len(kept)


def write_jsonl(rows: list[dict[str, str]], out: str | Path) -> None:
    write_text_atomically(out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


# ---------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------


def _parser(prog: str, description: str, key_flags: Sequence[str]) -> argparse.ArgumentParser:
    parser = command_parser(__doc__, prog, description)
    parser.add_argument("sources", nargs="+", help=".jsonl/.json/.parquet files or hub names")
    parser.add_argument("--out", required=True, help="output JSONL")
    parser.add_argument("--split", default="train", help="split of a hub dataset")
    for flag in key_flags:
        parser.add_argument(f"--{flag}-key", default=None, help=f"field holding the {flag}")
    parser.add_argument("--limit", type=whole_number, default=None, help="keep the first N rows")
    parser.add_argument("--shuffle-seed", type=int, default=None, help="shuffle before --limit")
    parser.add_argument("--tokenizer", default=None, help="with --max-prompt-tokens")
    parser.add_argument("--max-prompt-tokens", type=whole_number, default=None)
    parser.add_argument("--prompt-file", default=None, help="template used by the recipe")
    return parser


def _finish(rows: list[dict[str, str]], args: argparse.Namespace) -> int:
    rows, duplicates = dedupe(rows)
    long_prompts = 0
    if args.max_prompt_tokens is not None:
        if args.tokenizer is None:
            raise DataError("--max-prompt-tokens needs --tokenizer")
        template = Path(args.prompt_file).read_text() if args.prompt_file else None
        rows, long_prompts = drop_long_prompts(
            rows, args.tokenizer, args.max_prompt_tokens, template
        )
    if args.shuffle_seed is not None:
        random.Random(args.shuffle_seed).shuffle(rows)
    if args.limit is not None:
        rows = rows[: args.limit]
    if not rows:
        raise DataError(f"no rows left to write to {args.out}")
    write_jsonl(rows, args.out)
    print(
        f"wrote {len(rows)} rows to {args.out} "
        f"(dropped {duplicates} duplicate prompts, {long_prompts} over the token budget)"
    )
    return 0


def _convert(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    make_row: Callable[[str, dict[str, Any], argparse.Namespace], dict[str, str]],
) -> int:
    args = parser.parse_args(argv)
    check_output_file(args.out, "--out")  # before the sources are read (hub downloads)
    if args.prompt_file and not Path(args.prompt_file).is_file():
        raise DataError(f"--prompt-file: {args.prompt_file}: no such file")
    rows = [
        make_row(where, record, args)
        for source in args.sources
        for where, record in read_records(source, args.split)
    ]
    return _finish(rows, args)


def row_task_name(prep_command: str) -> str:
    """The `task_name` the rows `prep_command` writes carry: that of the registered task
    whose NeMo-RL data the command prepares, so that NeMo-RL routes them to its environment."""
    for name in tasks.task_names():
        nemo_rl = tasks.task(name).nemo_rl
        if nemo_rl is not None and nemo_rl.prep_command == prep_command:
            return nemo_rl.row_task_name
    raise LookupError(f"no registered task is prepared by {prep_command}")


@exits_on_config_error("darling-prep-math", DataError)
def main_math(argv: Sequence[str] | None = None) -> int:
    """problems with reference answers -> ResponseDataset JSONL."""
    parser = _parser("darling-prep-math", main_math.__doc__ or "", ["problem", "answer"])
    task_name = row_task_name("darling-prep-math")
    return _convert(
        parser,
        argv,
        lambda where, record, a: math_row(where, record, a.problem_key, a.answer_key, task_name),
    )


@exits_on_config_error("darling-prep-wildchat", DataError)
def main_wildchat(argv: Sequence[str] | None = None) -> int:
    """chat prompts (no answers) -> ResponseDataset JSONL."""
    parser = _parser("darling-prep-wildchat", main_wildchat.__doc__ or "", ["prompt"])
    parser.add_argument(
        "--task-name",
        default=row_task_name("darling-prep-wildchat"),
        help="routes rows to the RM env",
    )
    return _convert(
        parser, argv, lambda where, record, a: chat_row(where, record, a.prompt_key, a.task_name)
    )
