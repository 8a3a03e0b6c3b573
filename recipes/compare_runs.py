"""Evaluate the final checkpoints of several training runs and write the paper's table.

    uv run recipes/compare_runs.py RESULTS_DIR/qwen3-4b-darling RESULTS_DIR/qwen3-4b-grpo \
        --task math --out RESULTS_DIR/compare/qwen3-4b

Each run's checkpoint (step latest, or --step N) is exported to step_N/hf (cached) and
verified, then evaluated with the task's eval configs (math: conf/eval/math.yaml; wildchat:
conf/eval/noveltybench.yaml and conf/eval/creative.yaml, the paper's settings, NoveltyBench
as its leaderboard runs it unless --set noveltybench:mode=darling): --eval
NAME=CONFIG replaces one, --set NAME:KEY=VALUE overrides a key of one (e.g.
--set creative:judge.base_url=http://host:8000/v1). Writes OUT/RUN-step_N/<eval>/ (each
evaluation's samples and summary.json) and OUT/report/ (report.md: the runs with their
training config and step, the table; pass_at_k_*.png, quality_vs_diversity.png).
--dry-run prints every command and runs nothing.
"""

from __future__ import annotations

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "compare_runs")

import sys

from darling_nemo.config import command_parser, exits_on_config_error
from darling_nemo.evals.compare import compare_runs, parse_pairs, task_evals
from darling_nemo.export import LATEST


@exits_on_config_error("compare_runs", FileNotFoundError, ValueError)
def main(argv: list[str] | None = None) -> int:
    parser = command_parser(__doc__)
    parser.add_argument("runs", nargs="+", help="run folders (RESULTS_DIR/RUN_NAME)")
    parser.add_argument("--task", choices=sorted(task_evals()), required=True)
    parser.add_argument("--out", required=True, help="folder for the evaluations and report")
    parser.add_argument("--step", default=LATEST, help=f"step of every run (default: {LATEST})")
    parser.add_argument("--eval", action="append", default=[], metavar="NAME=CONFIG")
    parser.add_argument("--set", action="append", default=[], metavar="NAME:KEY=VALUE")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)

    evals = task_evals()[args.task]
    for name, configs in parse_pairs(args.eval, "--eval").items():
        evals[name] = configs[-1]
    sets = parse_pairs(args.set, "--set")
    written = compare_runs(args.runs, args.out, evals, sets, args.step, args.dry_run)
    if written:
        print(written["runs"])
        print(written["table"])
        for path in [*written["pngs"], written["report"]]:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # a missing run, step or failed evaluation: one message, exit code 2
