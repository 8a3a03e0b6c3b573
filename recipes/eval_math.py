"""Competition-math pass@k for one checkpoint: sample, grade with math-verify, summarise.

    uv run recipes/eval_math.py --config conf/eval/math.yaml \
        generator.model=/ckpt/step_200 output_dir=results/step_200/math

Writes output_dir/samples.jsonl (every response, its parsed answer and grade; one line per
problem) and output_dir/summary.json (pass@k per benchmark and averaged). Rerun the same
command to resume: finished problems are skipped. Several GPUs: run shard.index=i
shard.count=N in N processes (slurm/eval_math.sub does), then once without shard.*.
"""

from __future__ import annotations

import argparse
import sys

from darling_nemo.config import load_config, save_config
from darling_nemo.evals.math import run_math_eval
from darling_nemo.evals.plots import markdown_table
from darling_nemo.evals.schema import MathEvalConfig, validate_eval
from darling_nemo.schema import ConfigError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML under conf/eval/")
    parser.add_argument("overrides", nargs="*", help="key.path=value (strict: keys must exist)")
    args = parser.parse_args()

    # 1. Config: file + defaults chain + overrides, validated (all errors at once).
    raw = load_config(args.config, args.overrides)
    cfg = validate_eval(MathEvalConfig, raw)
    save_config(raw, f"{cfg.output_dir}/config.yaml")

    # 2. Sample the pending problems, grade each as it finishes, write the summary.
    summary = run_math_eval(cfg)

    # 3. Report (a shard's numbers are partial: the final 1-of-1 run writes summary.json).
    if cfg.shard.count > 1:
        print(
            f"shard {cfg.shard.index} of {cfg.shard.count} done; run without shard.* for the summary"
        )
        return
    print(markdown_table([summary]))
    print(f"summary: {cfg.output_dir}/summary.json")


if __name__ == "__main__":
    try:
        main()
    except ConfigError as err:  # bad config, input file or resume: the message says which
        sys.exit(f"error: {err}")
