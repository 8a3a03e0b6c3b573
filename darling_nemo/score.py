"""`darling-score`: DARLING rewards and advantages for groups of responses in a JSONL file.

    darling-score groups.jsonl -o scored.jsonl
    darling-score groups.jsonl --judge embedding --judge-set threshold=0.8
    darling-score groups.jsonl --config conf/wildchat_llama8b_darling.yaml --set floor=0
    darling-score groups.jsonl --set method=pass_at_k --set k=4   # a rival (docs/rivals.md)

Each input line: {"prompt": str, "responses": [str, ...], "quality": [float, ...]} (other
fields are kept); with --set method=unlikeliness also "logprobs": [float, ...], each
response's mean token log-probability under the policy that sampled it. Each output line adds class_ids, diversity, reward, advantage (one per
response), num_classes, pairs_judged and pairs_total. Every line is checked before anything
is scored; malformed lines are all reported with file and line number, and nothing is written.
Nothing is written either when a result is not a finite number (qualities so large that the
arithmetic overflows: the line is named), when -o names the input file, or when the judge
fails (a served judge on a dead port): one line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from darling_nemo import methods
from darling_nemo.config import (
    ConfigError,
    apply_overrides,
    check_output_file,
    command_parser,
    exits_on_config_error,
    load_config,
)
from darling_nemo.core import darling_batch
from darling_nemo.jsonl import scan_jsonl
from darling_nemo.judges import JudgeError
from darling_nemo.judges.registry import check_judge_models, judge_kind_names
from darling_nemo.methods.base import LOGPROBS
from darling_nemo.schema import DarlingConfig, validate_darling
from darling_nemo.tasks.judge import run_judge

GROUPS_PER_JUDGE_WAVE = 64  # groups partitioned together, so one judge call carries many pairs


def read_groups(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, group) of every line, each checked; raise one error listing every bad
    line (file:line)."""
    records, problems = scan_jsonl(path)
    groups = []
    for lineno, row in records:
        problem = _check_group(row)
        if problem:
            problems.append((lineno, problem))
        else:
            groups.append((lineno, row))
    if problems:
        lines = [f"{path}:{lineno}: {problem}" for lineno, problem in sorted(problems)]
        if len(lines) == 1:
            raise ValueError(f"{lines[0]} (nothing scored)")
        raise ValueError("malformed input, nothing scored:\n  " + "\n  ".join(lines))
    if not groups:
        raise ValueError(f"{path}: no groups found")
    return groups


def _check_group(row: dict[str, Any]) -> str | None:
    missing = [k for k in ("responses", "quality") if k not in row]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    responses, quality = row["responses"], row["quality"]
    if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
        return "`responses` must be a list of strings"
    if not responses:
        return "`responses` is empty"
    if not isinstance(quality, list):
        return f"`quality` must be a list of {len(responses)} numbers (one per response)"
    for field in ("quality", "logprobs")[: 1 + ("logprobs" in row)]:
        values = row[field]
        if not isinstance(values, list) or len(values) != len(responses):
            return f"`{field}` must be a list of {len(responses)} numbers (one per response)"
        for k, q in enumerate(values):
            if isinstance(q, bool) or not isinstance(q, int | float) or not math.isfinite(q):
                return f"{field}[{k}] = {q!r} is not a finite number"
    return None


def check_method_inputs(
    numbered: list[tuple[int, dict[str, Any]]], cfg: DarlingConfig, path: Path
) -> None:
    """A method that needs log-probabilities needs them on every line: name the first
    line without them (nothing scored)."""
    if LOGPROBS not in methods.method(cfg.method).inputs:
        return
    for lineno, row in numbered:
        if "logprobs" not in row:
            raise ValueError(
                f"{path}:{lineno}: method {cfg.method} needs `logprobs` (each response's mean "
                "token log-probability under the sampling policy) (nothing scored)"
            )


def score_groups(groups: list[dict[str, Any]], cfg: DarlingConfig) -> list[dict[str, Any]]:
    """Score groups in chunks so the judge sees the pairs of many groups per call."""
    judge = run_judge(None, cfg).make()  # final answers (a method with answer classes): math-verify
    settings = cfg.settings()
    needs_logprobs = LOGPROBS in methods.method(cfg.method).inputs
    scored = []
    for start in range(0, len(groups), GROUPS_PER_JUDGE_WAVE):
        chunk = groups[start : start + GROUPS_PER_JUDGE_WAVE]
        responses = [r for g in chunk for r in g["responses"]]
        quality = [q for g in chunk for q in g["quality"]]
        gids = [k for k, g in enumerate(chunk) for _ in g["responses"]]
        logprobs = [x for g in chunk for x in g["logprobs"]] if needs_logprobs else None
        with np.errstate(over="ignore", invalid="ignore"):  # refused by check_finite instead
            out = darling_batch(responses, quality, gids, judge, settings, logprobs=logprobs)
        stop = 0
        for k, g in enumerate(chunk):
            rows = slice(stop, stop + len(g["responses"]))
            stop = rows.stop
            scored.append(
                {
                    **g,
                    "class_ids": out.class_ids[rows].tolist(),
                    "diversity": out.diversity[rows].tolist(),
                    "reward": out.reward[rows].tolist(),
                    "advantage": out.advantage[rows].tolist(),
                    "num_classes": out.num_classes[k],
                    "pairs_judged": out.group_pairs_judged[k],
                    "pairs_total": out.group_pairs_total[k],
                }
            )
    return scored


def check_finite(scored: list[dict[str, Any]], lines: list[int], path: Path) -> None:
    """Refuse results that are not finite numbers (qualities near 1e308 overflow the group's
    mean and spread), naming the first such line; nothing has been written yet."""
    for lineno, row in zip(lines, scored, strict=True):
        for field in ("diversity", "reward", "advantage"):
            if not all(math.isfinite(x) for x in row[field]):
                largest = max(abs(q) for q in row["quality"])
                raise ValueError(
                    f"{path}:{lineno}: {field} is not finite ({row[field]}): the qualities "
                    f"(largest magnitude {largest:g}) overflow the arithmetic; scale them "
                    "down (nothing written)"
                )


def same_file(output: Path, source: Path) -> bool:
    """Whether writing `output` would overwrite `source`, however either path is spelled
    (relative, `..`, a symbolic or hard link)."""
    if output.expanduser().resolve() == source.expanduser().resolve():
        return True
    return output.exists() and source.exists() and output.samefile(source)


def build_config(args: argparse.Namespace) -> DarlingConfig:
    """Schema defaults <- the config file's `darling:` <- --judge <- --set / --judge-set."""
    section = DarlingConfig().model_dump(mode="json")
    if args.config:
        file_section = load_config(args.config).get("darling") or {}
        section = validate_darling(file_section).model_dump(mode="json")
    if args.judge:
        # Fill the chosen kind's defaults so --judge-set keys are checked against them.
        section["judge"] = validate_darling({"judge": {"kind": args.judge}}).judge.model_dump(
            mode="json"
        )
    overrides = [*args.set, *(f"judge.{item}" for item in args.judge_set)]
    return validate_darling(apply_overrides(section, overrides, DarlingConfig))


@exits_on_config_error("darling-score", ValueError, FileNotFoundError)
def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    parser = command_parser(__doc__, prog="darling-score")
    parser.add_argument("input", type=Path, help="JSONL of groups")
    parser.add_argument("-o", "--output", type=Path, help="output JSONL (default: stdout)")
    parser.add_argument("--config", help="YAML file whose `darling:` section is used")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"darling.KEY override; method= one of {', '.join(methods.method_names())} "
        "(docs/rivals.md)",
    )
    parser.add_argument("--judge", choices=judge_kind_names(), help="judge kind")
    parser.add_argument(
        "--judge-set", action="append", default=[], metavar="KEY=VALUE", help="judge option"
    )
    args = parser.parse_args(argv)
    cfg = build_config(args)
    if args.output:
        if same_file(args.output, args.input):
            raise ConfigError(
                f"--output: {args.output} is the input file {args.input}: name another file "
                "(nothing written)"
            )
        check_output_file(args.output, "--output")
    check_judge_models(cfg.judge, "judge")
    numbered = read_groups(args.input)
    check_method_inputs(numbered, cfg, args.input)
    try:
        scored = score_groups([group for _, group in numbered], cfg)
    except JudgeError as err:  # the classifier servers or the Ray pool gave up
        print(f"darling-score: judge failed: {err} (nothing written)", file=sys.stderr)
        return 2
    check_finite(scored, [line for line, _ in numbered], args.input)
    out = args.output.open("w") if args.output else (stdout or sys.stdout)
    try:
        for row in scored:
            out.write(json.dumps(row) + "\n")
    finally:
        if args.output:
            out.close()
    judged = sum(r["pairs_judged"] for r in scored)
    total = sum(r["pairs_total"] for r in scored)
    print(
        f"darling-score: {len(scored)} groups, {judged}/{total} pairs judged "
        f"(judge: {run_judge(None, cfg).said})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
