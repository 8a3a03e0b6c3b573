"""A user's TRL-style reward functions as DARLING's quality (`task.kind: reward_funcs`).

The functions live outside the package, named by import path (`pkg.module:function` or
`pkg.module.function`), found on `task.python_path` (default: the working directory, where a
TRL user's script and module sit). They are called as TRL 1.16's GRPOTrainer calls them
(`_calculate_rewards`): `f(prompts=..., completions=..., completion_ids=..., **columns)`,
the dataset's other columns as keyword arguments, returning one float or None per row.
Quality is TRL's weighted nansum over the functions; a row every function left None stops
the run (RewardFunctionError naming the functions and the row): DARLING needs a quality for
every response of a group.

The calls run in a process pool (`task.reward_workers` processes, spawned): a thread cannot be
stopped, a process can, so a call past `task.reward_timeout_s` is stopped by ending the pool
(its rows score 0.0: a verifier that did not answer did not pass), counted in
`darling/reward_timeouts`. TRL's `log_metric` / `log_extra` callables stay in the trainer
(they cannot cross processes). Torch-free: both engines use it.

`task.answer_func` (optional, the same import-path style) gives each completion's final answer
for the methods that compare final answers (outcome): called like the reward functions, in
the same pool with the same timeout, it returns one str or None (no answer) per row; a call
past the timeout leaves its rows without an answer (`darling/answer_timeouts`).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import math
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path
from typing import Any

from darling_nemo.console import say

NOT_PICKLED = ("log_metric", "log_extra")  # TRL's logging callables: the trainer's own
DUMMY_COMPLETION = "0"
POOL_START_METRIC = "darling/reward_pool_start_seconds"  # logged at the step that starts one
POOL_START_LIMIT_S = 600.0  # then the calls wait for the workers (the timeout starts in one)
WORKER_READY = 0  # what a worker's initializer puts on the starts queue (calls count from 1)


def config_error(message: str) -> Exception:
    """A ConfigError, imported when needed: the pool's workers import this module, and the
    schema (pydantic) would add seconds to every worker's start."""
    # lazy: the schema (pydantic) is ~0.4 s of every pool worker's start (see the docstring)
    from darling_nemo.schema import ConfigError

    return ConfigError(message)


class RewardFunctionError(RuntimeError):
    """A user's reward function raised (or answered wrongly) at run time: one line naming
    the function, the row and the exception."""


def add_python_path(folders: Sequence[str]) -> None:
    """Put the folders (relative to the working directory) first on sys.path, once each."""
    for folder in reversed(folders):
        absolute = str(Path(folder).resolve())
        if absolute not in sys.path:
            sys.path.insert(0, absolute)


def resolve(spec: str, key: str) -> Callable[..., Any]:
    """The function `spec` names (`pkg.module:function` or `pkg.module.function`); a missing
    module or attribute, or something not callable, is a ConfigError naming `key`."""
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise config_error(
            f"{key}: {spec!r} is not an import path (write my_module:my_function, the module "
            "on task.python_path)"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise config_error(
            f"{key}: {spec}: cannot import {module_name} ({err}); is its folder on "
            f"task.python_path (now relative to {os.getcwd()})?"
        ) from None
    except Exception as err:  # the user's module itself fails at import
        raise config_error(
            f"{key}: {spec}: importing {module_name} raised {type(err).__name__}: {err}"
        ) from None
    func = getattr(module, attr, None)
    if func is None:
        raise config_error(f"{key}: {spec}: {module_name} has no {attr!r}")
    if not callable(func):
        raise config_error(f"{key}: {spec}: {attr} is {type(func).__name__}, not a function")
    return func


def check_signature(func: Callable[..., Any], spec: str, key: str, columns: Sequence[str]) -> None:
    """`func` accepts TRL's keywords (prompts, completions, completion_ids and the columns)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return  # a builtin or C callable: the trial call decides
    keywords = {"prompts": [], "completions": [], "completion_ids": []}
    keywords.update({column: [] for column in columns})
    try:
        signature.bind(**keywords)
    except TypeError as err:
        raise config_error(
            f"{key}: {spec}{signature} cannot take TRL's keywords prompts=, completions=, "
            f"completion_ids= and the columns {sorted(columns)} ({err}); "
            f"{signature_fix(signature, keywords)}"
        ) from None


def signature_fix(signature: inspect.Signature, keywords: Mapping[str, Any]) -> str:
    """What to change: rename a parameter TRL would fill under another name (`completion` ->
    `completions`), else add **kwargs (TRL passes every column by name)."""
    needed = [
        name
        for name, param in signature.parameters.items()
        if param.default is inspect.Parameter.empty
        and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY, param.POSITIONAL_ONLY)
        and name not in keywords
    ]
    renames = [
        f"{name!r} to {close[0]!r}"
        for name in needed
        if (close := difflib.get_close_matches(name, list(keywords), n=1, cutoff=0.75))
    ]
    if renames:
        return "rename " + ", ".join(renames) + " (TRL passes them by these names)"
    return "add **kwargs"


def checked_scores(values: Any, rows: int, spec: str, where: str) -> list[float | None]:
    """`values` as one float or None per row; else a one-line problem (ValueError)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ValueError(f"{spec} returned {type(values).__name__}, not a list of floats {where}")
    if len(values) != rows:
        raise ValueError(f"{spec} returned {len(values)} values for {rows} completions {where}")
    scores: list[float | None] = []
    for i, value in enumerate(values):
        if value is None:
            scores.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(
                f"{spec} returned {type(value).__name__} {value!r:.40} for completion {i} "
                f"{where}: want a float or None"
            )
        if not math.isfinite(value):
            raise ValueError(f"{spec} returned {value} for completion {i} {where}")
        scores.append(float(value))
    return scores


def checked_answers(values: Any, rows: int, spec: str, where: str) -> list[str | None]:
    """`values` as one final answer (a str) or None per row; else a one-line problem
    (ValueError)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ValueError(f"{spec} returned {type(values).__name__}, not a list of answers {where}")
    if len(values) != rows:
        raise ValueError(f"{spec} returned {len(values)} answers for {rows} completions {where}")
    for i, value in enumerate(values):
        if value is not None and not isinstance(value, str):
            raise ValueError(
                f"{spec} returned {type(value).__name__} {value!r:.40} for completion {i} "
                f"{where}: want a str or None (no answer)"
            )
    return list(values)


def check_reward_funcs(
    specs: Sequence[str],
    python_path: Sequence[str],
    first_row: Mapping[str, Any],
    prefix: str,
    answer_func: str | None = None,
    timeout_s: float | None = None,
) -> list[str]:
    """The config phase: import every function (and the answer function) and call it once on
    the first prompt with a dummy completion; any problem is a ConfigError naming
    `<prefix>.reward_funcs[i]` (`<prefix>.answer_func`): a call slower than `timeout_s`
    (`task.reward_timeout_s`: every call at run time would be stopped and score 0), and a
    reward function that gives None for every completion. Returns one line per function
    checked: its key, name, values and seconds."""
    add_python_path(python_path)
    checked = []
    for i, spec in enumerate(specs):
        key = f"{prefix}.reward_funcs[{i}]"
        values, seconds = try_on_first_row(spec, key, first_row, checked_scores, timeout_s)
        if all(value is None for value in values):
            raise config_error(
                f"{key}: {spec} gave None for every completion of the first prompt (the "
                f"completion {DUMMY_COMPLETION!r}): a prompt no function scores has no quality"
            )
        checked.append(f"{key}: {spec} -> {values} in {seconds:.3f} s")
    if answer_func is not None:
        key = f"{prefix}.answer_func"
        values, seconds = try_on_first_row(answer_func, key, first_row, checked_answers, timeout_s)
        checked.append(f"{key}: {answer_func} -> {values} in {seconds:.3f} s")
    return checked


def try_on_first_row(
    spec: str,
    key: str,
    first_row: Mapping[str, Any],
    check: Callable[..., Any],
    timeout_s: float | None = None,
) -> tuple[list[Any], float]:
    """Import `spec`, call it on the first prompt with a dummy completion and `check` what it
    returns and how long it took; a problem is a ConfigError naming `key`. Returns the
    checked values and the call's seconds."""
    columns = {k: [v] for k, v in first_row.items() if k != "prompt"}
    func = resolve(spec, key)
    check_signature(func, spec, key, list(columns))
    started = time.perf_counter()
    try:
        values = func(
            prompts=[first_row["prompt"]],
            completions=[DUMMY_COMPLETION],
            completion_ids=[[0]],
            **columns,
        )
    except Exception as err:
        raise config_error(
            f"{key}: {spec} raised {type(err).__name__}: {err} on the first prompt with "
            f"the completion {DUMMY_COMPLETION!r}"
        ) from None
    seconds = time.perf_counter() - started
    try:
        values = check(values, 1, spec, "on the first prompt")
    except ValueError as err:
        raise config_error(f"{key}: {err}") from None
    if timeout_s is not None and seconds > timeout_s:
        raise config_error(
            f"{key}: {spec} took {seconds:.1f} s on the first prompt, over "
            f"task.reward_timeout_s={timeout_s:g} s: at run time every such call is stopped "
            "and scores 0 (make it faster or raise task.reward_timeout_s)"
        )
    return values, seconds


_WORKER_FUNCS: dict[str, Callable[..., Any]] = {}
_WORKER_STARTS: Any = None  # the pool's queue of started call ids


def start_worker(python_path: Sequence[str], starts: Any) -> None:
    """Pool initializer: the user's folders on the worker's sys.path; the queue on which it
    says which call it starts (the timeout counts from there, not from a slow spawn)."""
    global _WORKER_STARTS
    _WORKER_STARTS = starts
    add_python_path(python_path)
    starts.put(WORKER_READY)


def call_in_worker(
    call_id: int, spec: str, kwargs: dict[str, Any], answers: bool = False
) -> tuple[str, Any]:
    """Run one function on one chunk in a worker: ("ok", scores, or answers where `answers`)
    or ("error", (row, words)), the row being the chunk's first that raises on its own
    (found by calling row by row)."""
    _WORKER_STARTS.put(call_id)
    if spec not in _WORKER_FUNCS:
        _WORKER_FUNCS[spec] = resolve(spec, "task.answer_func" if answers else "task.reward_funcs")
    func = _WORKER_FUNCS[spec]
    check = checked_answers if answers else checked_scores
    rows = len(kwargs["prompts"])
    try:
        return "ok", check(func(**kwargs), rows, spec, "")
    except Exception as err:
        words = f"{type(err).__name__}: {err}"
    for row in range(rows):  # which row: the first that fails alone
        try:
            one = {
                k: v[row : row + 1] if is_column(v, kwargs["prompts"]) else v
                for k, v in kwargs.items()
            }
            check(func(**one), 1, spec, "")
        except Exception as err:
            return "error", (row, f"{type(err).__name__}: {err}")
    return "error", (0, words)


def prompt_key(prompt: Any) -> str:
    """A prompt's text (a conversational prompt's last message) for finding its row."""
    if isinstance(prompt, str):
        return prompt
    return str(prompt[-1].get("content", "")) if prompt else ""


class UserQuality:
    """The quality function a run hands DARLING: the weighted sum of the user's functions,
    each called in the worker pool on `workers` chunks of the batch; `answers`, the final
    answers of `answer_spec` (task.answer_func), called the same way."""

    __name__ = "user_reward_funcs"

    def __init__(
        self,
        specs: Sequence[str],
        weights: Sequence[float] | None,
        python_path: Sequence[str],
        workers: int,
        timeout_s: float,
        row_labels: Mapping[str, str],
        answer_spec: str | None = None,
    ) -> None:
        self.specs = list(specs)
        self.answer_spec = answer_spec
        self.weights = [1.0] * len(specs) if weights is None else list(weights)
        self.python_path = list(python_path)
        self.workers = workers
        self.timeout_s = timeout_s
        self.row_labels = dict(row_labels)  # prompt text -> "data.jsonl:7" or "id=..."
        self.pool: Pool | None = None
        self.starts: Any = None
        self.calls_made = 0
        self.timeouts_total = 0
        self.pool_start_total = 0.0  # seconds spent starting pools, not the functions' time
        self.last_metrics: dict[str, float] = {}

    def start_pool(self) -> Pool:
        """The pool, started (and waited for until every worker is up) if there is none."""
        if self.pool is None:
            started = time.perf_counter()
            context = multiprocessing.get_context("spawn")  # no fork of a threaded trainer
            self.starts = context.Queue()
            self.pool = context.Pool(self.workers, start_worker, (self.python_path, self.starts))
            ready, deadline = 0, time.monotonic() + POOL_START_LIMIT_S
            while ready < self.workers and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    ready += self.starts.get(timeout=0.5) == WORKER_READY
            self.pool_start_total += time.perf_counter() - started
        return self.pool

    def close(self) -> None:
        """End the workers (also what stops a hung call)."""
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        started, pool_before = time.perf_counter(), self.pool_start_total
        shared = {k: v for k, v in kwargs.items() if k not in NOT_PICKLED}
        total: list[float | None] = [None] * len(prompts)
        timeouts = 0
        for spec, weight in zip(self.specs, self.weights, strict=True):
            scores, timed_out = self.results_of(spec, prompts, completions, shared)
            timeouts += timed_out
            for row, value in enumerate(scores):
                if value is not None:
                    total[row] = (total[row] or 0.0) + weight * value
        self.timeouts_total += timeouts
        pool_seconds = self.pool_start_total - pool_before  # a pool started in this call
        self.last_metrics = {
            "darling/quality_seconds": time.perf_counter() - started - pool_seconds,
            "darling/reward_timeouts": float(timeouts),
        }
        if pool_seconds:
            self.last_metrics[POOL_START_METRIC] = pool_seconds
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for name, value in self.last_metrics.items():
                log_metric(name, value)
        self.check_scored(prompts, total)
        return total

    def check_scored(self, prompts: Sequence[Any], total: Sequence[float | None]) -> None:
        """A row every function left None is a RewardFunctionError naming the functions and
        the row (DARLING needs a quality for every response of a group)."""
        for row, value in enumerate(total):
            if value is None:
                label = self.row_labels.get(prompt_key(prompts[row]), f"row {row}")
                raise RewardFunctionError(
                    f"every reward function ({', '.join(self.specs)}) returned None for "
                    f"{label}: DARLING needs a quality for every completion"
                )

    def answers(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[str | None]:
        """Each completion's final answer (None: none) by `answer_spec`, called with the
        reward functions' keywords; `darling/answer_timeouts` counts the calls stopped."""
        if self.answer_spec is None:
            raise ValueError("no task.answer_func: these reward functions give no final answers")
        shared = {k: v for k, v in kwargs.items() if k not in NOT_PICKLED}
        found, timed_out = self.results_of(
            self.answer_spec, prompts, completions, shared, answers=True
        )
        self.timeouts_total += timed_out
        self.last_metrics["darling/answer_timeouts"] = float(timed_out)
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            log_metric("darling/answer_timeouts", float(timed_out))
        return found  # type: ignore[return-value]

    def results_of(
        self,
        spec: str,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        shared: dict,
        answers: bool = False,
    ) -> tuple[list[Any], int]:
        """One function over the batch, in chunks: its scores (or, `answers`, its final
        answers); the calls past the timeout are stopped (their rows 0.0, or no answer) and
        counted. A raise is a RewardFunctionError naming the function and the row."""
        size = max(1, -(-len(prompts) // self.workers))
        starts = list(range(0, len(prompts), size))
        pool = self.start_pool()
        extra = {k: v for k, v in shared.items() if not is_column(v, prompts)}
        calls: dict[int, tuple[int, AsyncResult]] = {}
        for start in starts:
            chunk = {k: v[start : start + size] for k, v in shared.items() if is_column(v, prompts)}
            chunk.update(prompts=prompts[start : start + size])
            chunk.update(completions=completions[start : start + size])
            self.calls_made += 1
            kwargs = {**extra, **chunk}
            call = pool.apply_async(call_in_worker, (self.calls_made, spec, kwargs, answers))
            calls[self.calls_made] = (start, call)
        results = self.wait_for(calls)
        found: list[Any] = []
        timed_out = 0
        for call_id, (start, _) in calls.items():
            rows = len(prompts[start : start + size])
            if call_id not in results:
                timed_out += 1
                found.extend([None if answers else 0.0] * rows)
                continue
            status, value = results[call_id]
            if status == "error":
                row, words = value
                label = self.row_labels.get(prompt_key(prompts[start + row]), f"row {start + row}")
                what = "answer function" if answers else "reward function"
                raise RewardFunctionError(f"{what} {spec} raised on {label}: {words}")
            found.extend(value)
        if timed_out:
            left = "have no answer (darling/answer" if answers else "score 0.0 (darling/reward"
            say(
                f"{spec}: {timed_out} call(s) past task.reward_timeout_s={self.timeout_s}s "
                f"stopped; their rows {left}_timeouts)"
            )
            self.close()  # the only way to stop a hung call; the next batch starts a new pool
        return found, timed_out

    def wait_for(self, calls: dict[int, tuple[int, AsyncResult]]) -> dict[int, Any]:
        """The results of the calls that end within timeout_s of their start in a worker
        (a worker's spawn is not the function's time); the others are left out."""
        started: dict[int, float] = {}
        results: dict[int, Any] = {}
        pending = dict(calls)
        while pending:
            with contextlib.suppress(queue.Empty):
                started.setdefault(self.starts.get(timeout=0.05), time.monotonic())
            now = time.monotonic()
            for call_id, (_, call) in list(pending.items()):
                if call.ready():
                    results[call_id] = call.get()
                    del pending[call_id]
                elif now - started.get(call_id, now) > self.timeout_s:
                    del pending[call_id]
        return results


def is_column(value: Any, prompts: Sequence[Any]) -> bool:
    """A per-row keyword (a dataset column, completion_ids), as opposed to trainer_state."""
    return isinstance(value, list) and len(value) == len(prompts)


def answer_keys(answers: Sequence[str | None]) -> list[str]:
    """What a batch's partition compares for a method with answer classes, one text per
    response: its final answer, or for a response with no answer (None) a text no other
    response has, so it is a class of its own. With no judge the core's partition joins
    exactly the equal texts (core.same_text), so the classes are the equal answers."""
    return [f"answer:{a}" if a is not None else f"none:{row}" for row, a in enumerate(answers)]
