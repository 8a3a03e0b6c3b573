"""DARLING (or its GRPO baseline) on WildChat prompts: NeMo-RL v0.4.0 GRPO, Megatron backend.

    uv run recipes/darling_wildchat.py                # the config that fits this machine
    # the paper's setup, inside the darling-nemo image (docs/nemo-rl-recipes.md):
    uv run recipes/darling_wildchat.py --config conf/wildchat_llama8b_darling.yaml \
        darling.judge.endpoints=[http://classifier-node:8000,http://classifier-node:8001]
    # before a GPU is spent: NeMo-RL's whole loop on CPU (docs/rehearsal.md)
    uv run recipes/darling_wildchat.py --config conf/wildchat_llama70b_darling.yaml --rehearse

Quality is NeMo-RL's RewardModelEnvironment (a Bradley-Terry reward model on its own GPUs:
env.reward_model); the steps are darling_nemo/recipe.py's, shared with darling_math.py.
"""

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "darling_wildchat")

import sys

from darling_nemo.recipe import Recipe, run_recipe

WILDCHAT = Recipe(
    name="wildchat",
    recipe="recipes/darling_wildchat.py",
    cpu_config="conf/local/wildchat_trl.yaml",
    node_config="conf/wildchat_qwen3_1p7b_1node_darling.yaml",
    cluster_config="conf/wildchat_llama8b_darling.yaml",
)


def main(argv: list[str] | None = None) -> int:
    return run_recipe(WILDCHAT, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
