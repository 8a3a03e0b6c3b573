"""The facts slurm/common.sh takes from the config (`darling-plan --layout-env FILE`)."""

from __future__ import annotations

import shlex
from typing import Any

from darling_nemo.plan.layout import read_layout, required
from darling_nemo.schema import PAIR_TEMPLATES, ServedJudgeConfig


def layout_env(cfg: dict[str, Any]) -> str:
    """The facts a launcher needs from the config, as shell assignments (`source`-able)."""
    lay = read_layout(cfg)
    judge = lay.darling.judge
    values = {
        "CFG_NUM_NODES": lay.num_nodes,
        "CFG_GPUS_PER_NODE": lay.gpus_per_node,
        "CFG_MODEL": lay.model,
        "CFG_JUDGE_KIND": judge.kind,
        # The classifier the servers load: the reference checkpoint of the pair template.
        "CFG_CLASSIFIER_MODEL": (
            PAIR_TEMPLATES[judge.template].reference_model
            if isinstance(judge, ServedJudgeConfig)
            else ""
        ),
        "CFG_CHECKPOINT_DIR": required(cfg, "checkpointing.checkpoint_dir"),
        # The launcher requeues a run NeMo-RL stopped at its save deadline below this step.
        "CFG_MAX_NUM_STEPS": required(cfg, "grpo.max_num_steps"),
    }
    return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items())
