"""The miniature: GRPO and DARLING side by side on a digit-sum task, on CPU, in minutes.

    uv run recipes/darling_mini.py                                  # conf/mini/default.yaml
    uv run recipes/darling_mini.py --config conf/mini/default.yaml trainer.max_steps=50

Reads top to bottom: load and validate the config; warm-start one tiny policy (shared by
every arm); train each arm with TRL from that policy with the same seed and settings
(only the `darling:` section differs); print and save the comparison table and the plots.
Outputs go to `output_dir` (default runs/mini). Rerunning the same command after a kill
continues: the warm start is reused, a finished arm is not retrained, an unfinished one
resumes from its newest checkpoint.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

from darling_nemo.config import load_config, save_config
from darling_nemo.mini.policy import tiny_llama, word_tokenizer
from darling_nemo.mini.report import arm_summary, format_table, plot_curves, plot_pass_at_k
from darling_nemo.mini.warm_start import warm_start
from darling_nemo.schema import MiniConfig, validate_section
from darling_nemo.trl_engine import digit_sum_targets, digit_sum_task, run

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "mini" / "default.yaml"


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="YAML config")
    parser.add_argument("overrides", nargs="*", help="a.b=c overrides (strict)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 deprecations in TRL

    # 1. Config: every key validated before anything runs.
    raw = load_config(args.config, args.overrides)
    cfg = validate_section(MiniConfig, raw)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config(raw, out / "config.yaml")
    started = time.perf_counter()

    # 2. Warm start: one tiny policy, unsure but capable, saved once and shared by every arm.
    warm_dir = out / "warm_start"
    if not (warm_dir / "config.json").is_file():
        task = digit_sum_task(cfg.task)
        targets = digit_sum_targets(cfg.task)
        targets = targets["train"] + targets["heldout"]
        tokenizer = word_tokenizer(task.vocabulary(targets))
        import torch

        torch.manual_seed(cfg.seed)
        model = tiny_llama(
            tokenizer,
            hidden_size=cfg.policy.hidden_size,
            num_layers=cfg.policy.num_layers,
            num_heads=cfg.policy.num_heads,
            intermediate_size=cfg.policy.intermediate_size,
            max_positions=cfg.trainer.max_completion_length + 2,
        )
        losses = warm_start(
            model,
            tokenizer,
            task,
            targets,
            steps=cfg.warm_start.steps,
            batch_size=cfg.warm_start.batch_size,
            learning_rate=cfg.warm_start.learning_rate,
            zipf_exponent=cfg.warm_start.zipf_exponent,
            seed=cfg.seed,
            progress=cfg.logging.progress_bar,
        )
        print(f"warm start: {cfg.warm_start.steps} steps, final loss {losses[-1]:.3f}")
        tokenizer.save_pretrained(warm_dir)
        model.save_pretrained(warm_dir)

    # 3. One TRL run per arm: same seed, policy, task, trainer and evaluation settings.
    shared = cfg.model_dump(mode="json", exclude={"arms", "warm_start", "policy"})
    summaries = {}
    for name, darling in cfg.arms.items():
        print(f"\n=== arm {name!r} ===")
        run(
            {
                **shared,
                "engine": "trl",
                "output_dir": str(out / name),
                "resume": True,
                "policy": {"kind": "pretrained", "name_or_path": str(warm_dir), "dtype": "float32"},
                "darling": darling.model_dump(mode="json"),
            }
        )
        summaries[name] = arm_summary(out / name, cfg.evaluation.pass_at_k)

    # 4. Report: the table (printed and saved) and the curves.
    first = out / next(iter(cfg.arms))
    start_eval = json.loads((first / "eval_history.jsonl").read_text().splitlines()[0])
    rows = {"warm start (step 0)": {**start_eval, "train_diversity_mean": ""}, **summaries}
    columns = [
        *(f"pass@{k}" for k in cfg.evaluation.pass_at_k),
        "distinct_correct",
        "distinct_all",
        "train_diversity_mean",
    ]
    table = format_table(rows, columns)
    wall = time.perf_counter() - started
    n = cfg.evaluation.num_samples
    note = (
        f"held-out targets, {n} samples per prompt at temperature {cfg.evaluation.temperature}; "
        f"seed {cfg.seed}; {cfg.trainer.max_steps} steps per arm; wall time this invocation "
        f"{wall:.0f} s"
    )
    print(f"\n{table}\n{note}")
    (out / "comparison.md").write_text(f"{table}\n\n{note}\n")
    (out / "comparison.json").write_text(
        json.dumps({"arms": summaries, "warm_start": start_eval, "wall_seconds": wall}, indent=2)
    )
    run_dirs = {name: out / name for name in cfg.arms}
    plot_curves(run_dirs, out / "curves.png")
    plot_pass_at_k(summaries, cfg.evaluation.pass_at_k, out / "pass_at_k.png")
    print(f"saved {out / 'comparison.md'}, {out / 'curves.png'}, {out / 'pass_at_k.png'}")
    return summaries


if __name__ == "__main__":
    main()
