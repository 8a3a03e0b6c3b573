"""NoveltyBench distinct and utility for one checkpoint.

    uv run recipes/eval_noveltybench.py --config conf/eval/noveltybench.yaml \
        generator.model=/ckpt/step_200 output_dir=results/step_200/noveltybench

Stage 1 samples 10 generations per prompt (generations.jsonl); stage 2 partitions them
greedily with the judge and rates them with the reward model (scores.jsonl); summary.json
holds the means. On GPUs run `stage=generate` and then `stage=score` as two commands so
vLLM's memory is free before the reward model loads. Rerun to resume.
"""

from __future__ import annotations

import argparse
import sys

from darling_nemo.config import load_config, save_config
from darling_nemo.evals.noveltybench import run_noveltybench
from darling_nemo.evals.plots import markdown_table
from darling_nemo.evals.schema import NoveltyBenchConfig, validate_eval
from darling_nemo.schema import ConfigError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML under conf/eval/")
    parser.add_argument("overrides", nargs="*", help="key.path=value (strict: keys must exist)")
    args = parser.parse_args()

    # 1. Config.
    raw = load_config(args.config, args.overrides)
    cfg = validate_eval(NoveltyBenchConfig, raw)
    save_config(raw, f"{cfg.output_dir}/config.yaml")

    # 2. Generate, partition, rate (each stage skips what is already on disk).
    summary = run_noveltybench(cfg)

    # 3. Report.
    if summary is None:
        print(f"generations written to {cfg.output_dir}/generations.jsonl; now run stage=score")
        return
    print(markdown_table([summary]))
    if not summary["judge"]["is_reference"]:
        print(f"note: {summary['judge']['note']}")
    print(f"summary: {cfg.output_dir}/summary.json")


if __name__ == "__main__":
    try:
        main()
    except ConfigError as err:  # bad config, input file or resume: the message says which
        sys.exit(f"error: {err}")
