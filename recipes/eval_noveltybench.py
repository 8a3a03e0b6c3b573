"""NoveltyBench distinct and utility for one checkpoint.

    uv run recipes/eval_noveltybench.py --config conf/eval/noveltybench.yaml \
        generator.model=/ckpt/step_200 output_dir=results/step_200/noveltybench

Stage 1 samples 10 generations per prompt (generations.jsonl); stage 2 partitions them
greedily with the judge and rates them with the reward model (scores.jsonl); summary.json
holds the means. On GPUs run `stage=generate` and then `stage=score` as two commands so
vLLM's memory is free before the reward model loads. Rerun to resume. `mode=upstream` (the
default) scores as the public leaderboard does, `mode=darling` as the DARLING paper's fork
(docs/noveltybench-modes.md).
"""

from __future__ import annotations

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "eval_noveltybench")

import sys

from darling_nemo.config import RESUMES, exits_on_config_error, parse_config
from darling_nemo.evals.noveltybench import run_noveltybench
from darling_nemo.evals.plots import markdown_table
from darling_nemo.evals.run_source import resolve_run
from darling_nemo.evals.schema import NoveltyBenchConfig


@exits_on_config_error("eval_noveltybench", on_interrupt=RESUMES)
def main(argv: list[str] | None = None) -> int:
    # 1. Config, validated and saved as output_dir/config.yaml.
    cfg = parse_config(__doc__, argv, NoveltyBenchConfig, save=True, resolve=resolve_run)

    # 2. Generate, partition, rate (each stage skips what is already on disk).
    summary = run_noveltybench(cfg)

    # 3. Report.
    if summary is None:
        print(f"generations written to {cfg.output_dir}/generations.jsonl; now run stage=score")
        return 0
    print(markdown_table([summary]))
    print(f"note: {summary['mode_note']}")
    if not summary["judge"]["is_reference"]:
        print(f"note: {summary['judge']['note']}")
    print(f"summary: {cfg.output_dir}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # a bad config, input file or resume: one message, exit code 2
