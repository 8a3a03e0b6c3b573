"""Reward functions for the code_tests example: TRL-style, outside the package.

    passes_tests(prompts, completions, tests, **kwargs) -> list[float]

    normalised_code(prompts, completions, **kwargs) -> list[str | None]

1.0 when the completion, run with the prompt's unit tests (the `tests` column of
prompts.jsonl), exits cleanly within TIMEOUT_S seconds; else 0.0. Each run is a fresh
`python -I` (isolated: no user site, no PYTHON* variables) in a temporary folder, with CPU
time and memory limits where the system has them. This isolates mistakes, not malice: run
untrusted models' code in a container.

`normalised_code` is the example's `task.answer_func` (for darling.method=outcome): a
completion's final answer is its program, so two completions that differ only in formatting
or comments are one answer; one that is not Python has none.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT_S = 5.0
MEMORY_BYTES = 512 * 1024 * 1024


def completion_text(completion) -> str:
    """A TRL completion's text: a string, or [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, str):
        return completion
    return "".join(str(message.get("content") or "") for message in completion)


def code_of(text: str) -> str:
    """The first ```python block of the text, else the whole text."""
    if "```" not in text:
        return text
    block = text.split("```", 2)[1]
    return block.removeprefix("python").lstrip("\n")


def limit_resources() -> None:  # in the child, before exec
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (int(TIMEOUT_S) + 1, int(TIMEOUT_S) + 1))
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    except (ImportError, ValueError, OSError):  # not on this system: the timeout still holds
        pass


def run_with_tests(code: str, tests: str) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "program.py"
        program.write_text(code + "\n\n" + tests + "\n")
        try:
            done = subprocess.run(
                [sys.executable, "-I", str(program)],
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=TIMEOUT_S,
                preexec_fn=limit_resources if os.name == "posix" else None,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0


def passes_tests(prompts, completions, tests, **kwargs) -> list[float]:
    """1.0 if the completion's code passes the row's tests, else 0.0."""
    return [
        float(run_with_tests(code_of(completion_text(c)), t))
        for c, t in zip(completions, tests, strict=True)
    ]


def defines_function(prompts, completions, entry_point, **kwargs) -> list[float]:
    """A small shaping reward: 1.0 if the completion defines the asked-for function."""
    return [
        float(f"def {name}(" in completion_text(c))
        for c, name in zip(completions, entry_point, strict=True)
    ]


def normalised_code(prompts, completions, **kwargs) -> list[str | None]:
    """A completion's final answer for outcome exploration: its code as Python reads it
    (ast.unparse drops comments and formatting); None where it is not Python."""
    answers: list[str | None] = []
    for completion in completions:
        try:
            answers.append(ast.unparse(ast.parse(code_of(completion_text(completion)))))
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # not a program we can read
            answers.append(None)
    return answers
