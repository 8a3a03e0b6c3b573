"""Competition-math pass@k for one checkpoint: sample, grade with math-verify, summarise.

    uv run recipes/eval_math.py --config conf/eval/math.yaml \
        generator.model=/ckpt/step_200 output_dir=results/step_200/math

Writes output_dir/samples.jsonl (every response, its parsed answer and grade; one line per
problem) and output_dir/summary.json (pass@k per benchmark and averaged). Rerun the same
command to resume: finished problems are skipped. Several GPUs: run shard.index=i
shard.count=N in N processes (slurm/eval_math.sub does), then once without shard.*.
"""

from __future__ import annotations

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "eval_math")

import sys

from darling_nemo.config import RESUMES, exits_on_config_error, parse_config
from darling_nemo.evals.math import run_math_eval
from darling_nemo.evals.plots import markdown_table
from darling_nemo.evals.run_source import resolve_run
from darling_nemo.evals.schema import MathEvalConfig


@exits_on_config_error("eval_math", on_interrupt=RESUMES)
def main(argv: list[str] | None = None) -> int:
    # 1. Config: file + defaults chain + overrides, validated (all errors at once), saved
    #    as output_dir/config.yaml once run=RUN_DIR [step=N] or generator.model is resolved
    #    (a run: its step exported to step_N/hf, cached).
    cfg = parse_config(__doc__, argv, MathEvalConfig, save=True, resolve=resolve_run)

    # 2. Sample the pending problems, grade each as it finishes, write the summary.
    summary = run_math_eval(cfg)

    # 3. Report (a shard's numbers are partial: the final 1-of-1 run writes summary.json).
    if cfg.shard.count > 1:
        print(
            f"shard {cfg.shard.index} of {cfg.shard.count} done; run without shard.* for the summary"
        )
        return 0
    print(markdown_table([summary]))
    print(f"summary: {cfg.output_dir}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # a bad config, input file or resume: one message, exit code 2
