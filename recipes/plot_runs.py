"""Plots and a Markdown table from the summary.json files of several evaluation runs.

    uv run recipes/plot_runs.py results/base results/grpo results/darling --out results/plots

Each argument is a summary.json or a folder searched for them. Writes pass_at_k_*.png (log-k
axis, one line per run), quality_vs_diversity.png (NoveltyBench) and report.md.
"""

from __future__ import annotations

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "plot_runs")

import sys

from darling_nemo.config import command_parser, exits_on_config_error
from darling_nemo.evals.plots import make_report


@exits_on_config_error("plot_runs", FileNotFoundError, ValueError)
def main(argv: list[str] | None = None) -> int:
    parser = command_parser(__doc__)
    parser.add_argument("runs", nargs="+", help="summary.json files or folders holding them")
    parser.add_argument("--out", required=True, help="folder for the PNGs and report.md")
    args = parser.parse_args(argv)

    written = make_report(args.runs, args.out)
    print(written["table"])
    for path in [*written["pngs"], written["report"]]:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # a missing or malformed summary.json: one message, exit code 2
