"""Creative writing for one checkpoint, judged by an LLM behind an OpenAI-compatible server.

    export OPENAI_API_KEY=...   # or a local server: judge.base_url=http://127.0.0.1:8000/v1
    uv run recipes/eval_creative.py --config conf/eval/creative.yaml \
        generator.model=/ckpt/step_200 output_dir=results/step_200/creative \
        prompts=my_prompts.jsonl judge.base_url=https://api.openai.com/v1 judge.model=gpt-4o

Pairwise Elo against earlier runs: pairwise.enabled=true \
    'pairwise.opponents=[results/base/creative,results/grpo/creative]'

Writes generations.jsonl, judgements.jsonl (every reply, score, attempt count and error),
pairwise.jsonl and summary.json. Rerun to resume; items that failed are judged again.
"""

from __future__ import annotations

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "eval_creative")

import sys

from darling_nemo.config import RESUMES, exits_on_config_error, parse_config
from darling_nemo.evals.creative import run_creative
from darling_nemo.evals.plots import markdown_table
from darling_nemo.evals.records import load_prompts
from darling_nemo.evals.run_source import resolve_run
from darling_nemo.evals.schema import CreativeEvalConfig


def prompts_checked(cfg: CreativeEvalConfig) -> CreativeEvalConfig:
    """`resolve_run`, and the prompts file read (a missing file or bad row: a ConfigError
    naming it) before anything is written."""
    cfg = resolve_run(cfg)
    load_prompts(cfg.prompts, cfg.prompt_key, cfg.id_key, cfg.max_prompts)
    return cfg


@exits_on_config_error("eval_creative", on_interrupt=RESUMES)
def main(argv: list[str] | None = None) -> int:
    # 1. Config and prompts checked, then saved as output_dir/config.yaml (a refused start
    #    writes nothing).
    cfg = parse_config(__doc__, argv, CreativeEvalConfig, save=True, resolve=prompts_checked)

    # 2. Generate, judge with the rubric, compare pairwise if asked (each step resumes).
    summary = run_creative(cfg)

    # 3. Report; failures are listed, never hidden, and nothing judged is a failed run.
    if summary["failed"] and not summary["judged"]:
        print(
            f"eval_creative: all {summary['failed']} pieces failed to be judged (see "
            f"{cfg.output_dir}/judgements.jsonl); last error: {summary['last_error']}",
            file=sys.stderr,
        )
        return 1
    print(markdown_table([summary]))
    if summary["failed"]:
        print(f"{summary['failed']} pieces failed to be judged: {summary['failed_items'][:10]}")
    if "elo" in summary:
        for name, rating in sorted(summary["elo"]["ratings"].items(), key=lambda x: -x[1]):
            print(f"Elo {name}: {rating:.0f}")
    print(f"summary: {cfg.output_dir}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # a bad config, input file or resume: one message, exit code 2
