"""DARLING (or its GRPO baseline) on competition math: NeMo-RL v0.4.0 GRPO, Megatron backend.

    uv run recipes/darling_math.py                    # the config that fits this machine
    # the paper's setup, inside the darling-nemo image (docs/nemo-rl-recipes.md):
    uv run recipes/darling_math.py --config conf/math_qwen3_4b_darling.yaml \
        darling.judge.endpoints=[http://classifier-node:8000] grpo.max_num_steps=200
    # before a GPU is spent: NeMo-RL's whole loop on CPU (docs/rehearsal.md)
    uv run recipes/darling_math.py --config conf/math_qwen3_4b_darling.yaml --rehearse
    uv run recipes/darling_math.py --config conf/math_qwen3_4b_grpo.yaml --dry-run

Quality is NeMo-RL's MathEnvironment (math-verify: 1 correct, 0 otherwise); the steps are
darling_nemo/recipe.py's, shared with recipes/darling_wildchat.py.
"""

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "darling_math")

import sys

from darling_nemo.recipe import Recipe, run_recipe

MATH = Recipe(
    name="math",
    recipe="recipes/darling_math.py",
    cpu_config="conf/local/math_trl.yaml",
    node_config="conf/math_qwen3_1p7b_1node_darling.yaml",
    cluster_config="conf/math_qwen3_4b_darling.yaml",
)


def main(argv: list[str] | None = None) -> int:
    return run_recipe(MATH, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
