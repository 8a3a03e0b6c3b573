"""The CPU rehearsal of a NeMo-RL run: `recipes/darling_*.py --rehearse` (docs/rehearsal.md).
run.py orchestrates; shrink.py says what changes; standins.py (with
policy_standins.py, generation_standins.py) replaces the GPU workers; swap.py installs them."""

# The modules swap.py patches as they are imported (its PATCHES). site/sitecustomize.py reads
# only this: a rehearsal process imports swap.py when it first imports one of them.
PATCHED_MODULES = (
    "nemo_rl.distributed.worker_groups",
    "nemo_rl.distributed.ray_actor_environment_registry",
    "darling_nemo.nemo_rl.transform",
)
