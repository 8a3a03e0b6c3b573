"""Held-out evaluation of every TRL run: pass@k and distinct correct answers.

For each prompt, n responses are sampled; a response is correct when its quality is > 0
(the same convention as the core's `partition_scope: correct`). Reported, as means over
prompts:

- pass@k for each k: unbiased, from n samples with c correct (`metrics.pass_at_k`);
- distinct_correct: equivalence classes among the correct responses, by the same
  partition the training reward uses (core.partition_groups with the run's judge);
- distinct_all: classes among all n responses;
- <stratum>/pass@k: pass@k over the rows of each stratum, where rows name one (the routes
  task's held-out grids are "hard" or "easy").

The sampling RNG is forked and seeded per call, so evaluating never changes the training
run's random stream and the same checkpoint always gives the same numbers. A run appends
one line per evaluated step to `eval_history.jsonl` (step 0, every
`evaluation.every_steps`, the last step); a resumed run first drops the steps it redoes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from darling_nemo.core import PairJudge, partition_groups
from darling_nemo.metrics import pass_at_k
from darling_nemo.resume import write_text_atomically
from darling_nemo.schema import TrlRunConfig
from darling_nemo.trl.tasks import QualityFn, TrainingTask


@torch.no_grad()
def sample_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[Mapping[str, Any]],
    num_samples: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
) -> list[str]:
    """`num_samples` sampled continuations of one prompt, decoded without special tokens.

    A conversational prompt (a list of messages) is rendered in the tokenizer's chat
    template with the generation prompt, as TRL renders it for training.
    """
    if isinstance(prompt, str):
        encoded = tokenizer(prompt, return_tensors="pt")
    else:
        text = tokenizer.apply_chat_template(
            list(prompt), add_generation_prompt=True, tokenize=False
        )
        encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    encoded = encoded.to(model.device)
    was_training = model.training
    model.eval()
    output = model.generate(
        **encoded,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        max_new_tokens=max_new_tokens,
        num_return_sequences=num_samples,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if was_training:
        model.train()
    completions = output[:, encoded["input_ids"].shape[1] :]
    return tokenizer.batch_decode(completions, skip_special_tokens=True)


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[Mapping[str, Any]],
    quality: QualityFn,
    judge: PairJudge | None,
    threshold: float,
    num_samples: int,
    ks: Sequence[int],
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> dict[str, float]:
    """Mean pass@k, distinct correct and distinct overall answers over `rows` (dicts with "prompt")."""
    bad_k = [k for k in ks if not 1 <= k <= num_samples]
    if bad_k:
        raise ValueError(f"pass@k needs 1 <= k <= num_samples={num_samples}, got k={bad_k}")
    with torch.random.fork_rng(devices=[model.device] if model.device.type == "cuda" else []):
        torch.manual_seed(seed)
        samples = [
            sample_completions(
                model, tokenizer, row["prompt"], num_samples, max_new_tokens, temperature
            )
            for row in rows
        ]
    correct_groups, all_groups, num_correct = [], [], []
    for row, completions in zip(rows, samples, strict=True):
        columns = {key: [value] * num_samples for key, value in row.items() if key != "prompt"}
        scores = quality(prompts=[row["prompt"]] * num_samples, completions=completions, **columns)
        correct = [c for c, s in zip(completions, scores, strict=True) if s is not None and s > 0]
        num_correct.append(len(correct))
        correct_groups.append(correct)
        all_groups.append(completions)
    distinct_correct = [
        p.num_classes for p in partition_groups(unique(correct_groups), judge, threshold)
    ]
    distinct_all = [p.num_classes for p in partition_groups(unique(all_groups), judge, threshold)]
    result = {
        f"pass@{k}": float(np.mean([pass_at_k(num_samples, c, k) for c in num_correct])) for k in ks
    }
    result["distinct_correct"] = float(np.mean(distinct_correct))
    result["distinct_all"] = float(np.mean(distinct_all))
    return result | stratum_pass_at_k(rows, num_correct, num_samples, ks)


def unique(groups: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each group's distinct texts, in order. The partition joins equal texts before any
    judge is asked (`core.lexical_decision`), so the classes are counted the same without
    the copies, and a group of 128 samples with 70 distinct routes is judged on 70 texts."""
    return [list(dict.fromkeys(group)) for group in groups]


def stratum_pass_at_k(
    rows: Sequence[Mapping[str, Any]], num_correct: Sequence[int], n: int, ks: Sequence[int]
) -> dict[str, float]:
    """Mean pass@k over the rows of each `stratum` a row names ("hard/pass@64"); {} when no
    row names one."""
    strata = sorted({str(row["stratum"]) for row in rows if "stratum" in row})
    result = {}
    for stratum in strata:
        counts = [
            c for row, c in zip(rows, num_correct, strict=True) if row.get("stratum") == stratum
        ]
        for k in ks:
            result[f"{stratum}/pass@{k}"] = float(np.mean([pass_at_k(n, c, k) for c in counts]))
    return result


def history_steps(path: Path) -> list[int]:
    """The steps `eval_history.jsonl` holds, in order ([] before the first evaluation)."""
    if not path.is_file():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def truncate_history(path: Path, after_step: int) -> None:
    """Drop evaluation records past `after_step`: a resumed run recomputes those steps."""
    if not path.is_file():
        return
    keep = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and json.loads(line)["step"] <= after_step
    ]
    write_text_atomically(path, "".join(line + "\n" for line in keep))


def run_evaluation(
    cfg: TrlRunConfig, task: TrainingTask, model: Any, tokenizer: Any, step: int
) -> dict[str, float]:
    """`evaluate` on the run's held-out prompts with its `evaluation:` settings, seeded by
    the run's seed and the step."""
    rows = task.heldout_rows[: cfg.evaluation.max_prompts]
    ev = cfg.evaluation
    return evaluate(
        model,
        tokenizer,
        rows,
        task.quality,
        task.judge if task.evaluation_judge is None else task.evaluation_judge,
        cfg.darling.judge.threshold,
        num_samples=ev.num_samples,
        ks=ev.pass_at_k,
        max_new_tokens=cfg.trainer.max_completion_length,
        temperature=ev.temperature,
        seed=cfg.seed + step,
    )


def append_history(path: Path, step: int, result: Mapping[str, float]) -> None:
    """One evaluated step, appended to `eval_history.jsonl`."""
    with path.open("a") as f:
        f.write(json.dumps({"step": step, **result}) + "\n")
