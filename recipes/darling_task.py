"""DARLING on your own task: your TRL-style reward functions as the quality (docs/your-own-task.md).

    uv run recipes/darling_task.py --config examples/code_tests/trl.yaml --dry-run
    uv run recipes/darling_task.py --config examples/code_tests/trl.yaml
    # NeMo-RL (Megatron), the same reward functions in one generic environment:
    uv run recipes/darling_task.py --config conf/code_tests_qwen3_1p7b_darling.yaml --dry-run

The config's `task.kind: reward_funcs` names the functions by import path; the steps are
darling_nemo/recipe.py's, shared with the other recipes.
"""

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "darling_task")

import sys

from darling_nemo.recipe import Recipe, run_recipe

USER_TASK = Recipe(
    name="reward_funcs",
    recipe="recipes/darling_task.py",
    cpu_config="examples/code_tests/trl.yaml",
    node_config="conf/code_tests_qwen3_1p7b_darling.yaml",
    cluster_config="conf/code_tests_qwen3_1p7b_darling.yaml",
)


def main(argv: list[str] | None = None) -> int:
    return run_recipe(USER_TASK, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
