"""The single-node engine: DARLING on TRL's GRPOTrainer (one process: a laptop, one GPU).

reward.py    the TRL reward adapter, DARLING's only touch point with TRL: quality reward
             functions in, the core's DARLING advantages out; TRL settings that would
             change them are refused by name
tasks.py     the tasks (dice, math from JSONL, chat prompts) with their quality functions
             (math-verify, a reward model, a length stand-in) and pair judges
policy.py    the policy: a pretrained causal LM, or a tiny Llama built from the config
evaluate.py  held-out pass@k and distinct correct answers, for every TRL run
run.py       the run: GRPO arguments, prompt order, callbacks, checkpoints, resuming

Importing this package (and validating a config) needs no torch: a recipe's --dry-run
checks a config anywhere.

    from darling_nemo.trl import run
    metrics = run(load_config("conf/local/math_trl.yaml"))
"""

from darling_nemo.trl.run import run, validate_trl_config

__all__ = ["run", "validate_trl_config"]
