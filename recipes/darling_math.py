"""DARLING (or its GRPO baseline) on competition math: NeMo-RL v0.4.0 GRPO, Megatron backend.

    # inside the NeMo-RL v0.4.0 container, from the repository root (README "NeMo-RL recipes")
    python recipes/darling_math.py --config conf/math_qwen3_4b_darling.yaml \
        darling.judge.endpoints=[http://classifier-node:8000] grpo.max_num_steps=200
    # check a config anywhere (no NeMo-RL, no GPU): load, validate, print, exit
    uv run recipes/darling_math.py --config conf/math_qwen3_4b_grpo.yaml --dry-run
    # a config with `engine: trl` runs the single-machine TRL engine instead

Reads top to bottom: load the config (`defaults:` chain, strict a.b=c overrides), validate
the darling: section and its consistency with NeMo-RL's grpo:/loss_fn: keys, print it;
then start Ray and the tokenizer, build the prompts and NeMo-RL's MathEnvironment
(math-verify quality), save the resolved config in the run's log directory, and run
NeMo-RL's own setup() + grpo_train() with the DARLING reward hooked in after rollouts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from darling_nemo.config import load_config, save_config
from darling_nemo.schema import ConfigError, validate_nemo_rl_config

# The NeMo-RL keys this package knows: every nemo_rl config may only use keys found here.
REFERENCE_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "base" / "common.yaml"
TASK = "math"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="YAML config (conf/*.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print only")
    parser.add_argument("--rehearse", action="store_true", help="run it whole on this CPU")
    parser.add_argument("overrides", nargs="*", help="a.b=c overrides (strict; +a.b=c adds)")
    args = parser.parse_args(argv)

    # 1. Config: the whole file and every override checked before anything starts.
    try:
        cfg = load_config(args.config, args.overrides)
        if cfg.get("engine") == "nemo_rl":
            validate_nemo_rl_config(cfg, reference=load_config(REFERENCE_CONFIG))
            if cfg["env"]["reward_model"]["enabled"]:
                raise ConfigError(
                    "env.reward_model.enabled=true: a reward-model config; "
                    "run it with recipes/darling_wildchat.py"
                )
    except ConfigError as err:
        print(f"{args.config}: {err}", file=sys.stderr)
        return 2
    if args.rehearse:
        from darling_nemo.rehearsal.run import rehearse

        return rehearse(Path(__file__).resolve(), args.config, args.overrides, TASK)
    print(yaml.safe_dump(cfg, sort_keys=False), flush=True)
    if args.dry_run:
        return 0

    # 2. Single machine: the TRL engine validates and saves its own config.
    if cfg.get("engine") == "trl":
        from darling_nemo.trl_engine import run

        try:
            print(run(cfg))
        except (ConfigError, ValueError) as err:
            print(f"{args.config}: {err}", file=sys.stderr)
            return 2
        return 0
    if cfg.get("engine") != "nemo_rl":
        engine = cfg.get("engine")
        print(f"{args.config}: engine must be nemo_rl or trl, got {engine!r}", file=sys.stderr)
        return 2

    # 3. NeMo-RL: fail early (with how to run it) when it is not installed.
    from darling_nemo import nemo_rl_adapter as nemo

    nemo.require_nemo_rl(f"python recipes/{Path(__file__).name} --config {args.config}")
    cfg, tokenizer = nemo.start(cfg)  # numbered log dir, Ray, tokenizer, generation config
    save_config(cfg, Path(cfg["logger"]["log_dir"]) / "config.yaml")

    # 4. Prompts + NeMo-RL's MathEnvironment (math-verify: 1 correct, 0 otherwise).
    data = nemo.setup_data(tokenizer, cfg, TASK)

    # 5. NeMo-RL setup() + grpo_train(), DARLING reward after every rollout.
    try:
        nemo.train(cfg, tokenizer, data)
    except nemo.DriverFailed as failed:
        print(failed, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
