"""Megatron contract, second part: NeMo-RL v0.4.0's own `MegatronPolicyWorker.__init__` on CPU,
with the pinned Megatron-LM (af73aa2) and Megatron-Bridge (62f4704), up to and including
`ConfigContainer.validate()` (docs/contracts.md).

The worker turns `policy.megatron_cfg` into Megatron objects: the HF -> Megatron model
provider (Megatron-Bridge), the overrides (TP/PP/CP/SP, dtypes, recompute, fusions, offload,
NeMo-RL's own asserts), `OptimizerConfig(**optimizer)`, `SchedulerConfig(**scheduler)` and the
container's `validate()`. All of it runs here unchanged. What is replaced, and why:

- the process group (`torch.distributed.init_process_group("nccl")`): a no-op, with
  `WORLD_SIZE` the policy's GPU count as NeMo-RL's grpo.setup() assigns it, which is where
  Megatron-Bridge reads the world size when no group exists;
- the HF -> Megatron import (`import_model_from_hf_name`): the same `AutoBridge` provider,
  built from a `config.json` alone (the package's architecture table, or the local model's
  own), saved as the `run_config.yaml` the worker reads back; no weights, no model build;
- the model build (`setup_megatron_model`, where CUDA starts): the contract stops there;
- Transformer Engine, which does not install without CUDA: Megatron asks it three questions
  before the model build, answered as TE 2.5.0 (the version NeMo-RL v0.4.0's container pins)
  answers them: its version, that fused RoPE exists, and the keyword arguments of its
  `FusedAdam` that the precision-aware optimizer needs (NeMo-RL's own example configs turn
  that optimizer on). They are put in place after Megatron is imported, so no TE layer is
  ever built;
- `megatron.training.utils` and `megatron.inference...mcore_engine_server`, which the worker
  module imports for training and generation but the pinned `megatron/core` archive does not
  ship: placeholders that raise if called (they are not, before the model build).

It runs in a child process (`python -m darling_nemo.rehearsal.contract_megatron_worker
JOBS.json`) so that none of this reaches the rehearsal's own process. Importing Megatron
costs 20-40 s; each config then takes well under a second, and each verdict is cached under
the environment (keyed by the policy section, the world size, the sources and this file).

Rehearsal-only: nothing here runs in a real training run.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from darling_nemo.plan.architectures import resolve_architecture
from darling_nemo.plan.layout import policy_world_size
from darling_nemo.rehearsal.contract_child import (
    ContractError,
    check_jobs,
    checked,
    model_folder,
    phase,
    stopped_at,
)
from darling_nemo.rehearsal.shrink import lookup

PINNED = {
    "Megatron-LM": "af73aa2cebf94a0bee5ea6dda2614ad989faffae",
    "Megatron-Bridge": "62f4704b8d665ac4a8c318a809a070217caa8901",
}
# Written by containers/megatron_contract_env.sh into the environment it extends.
SOURCES_FILE = "megatron_sources.json"
IMPORT_ROOT = {"Megatron-LM": ".", "Megatron-Bridge": "src"}  # the folder holding megatron/
# What the pinned commits call themselves (package_info.py), for an installed copy (NeMo-RL's
# container installs both from its 3rdparty/ submodules).
INSTALLED = {
    "Megatron-LM": ("megatron.core", "0.15.0rc3"),
    "Megatron-Bridge": ("megatron.bridge", "0.1.0rc0"),
}
ENV_SCRIPT = "containers/megatron_contract_env.sh"
TE_VERSION = "2.5.0"
# Per family, the config.json values the architecture table does not hold (from the
# checkpoints' own config.json files: Qwen3 *-Base, Llama 3.1 / 3.3).
FAMILY_HF = {
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
    },
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
}


# ------------------------------------------------------------------------ the rehearsal's side


def sources(prefix: str | None = None) -> tuple[dict[str, str] | None, str]:
    """(name -> the folder to import it from, '') where the pinned sources are at hand, else
    (None, why not). Either containers/megatron_contract_env.sh recorded them in the
    environment at `prefix` (default: this one), or they are installed as NeMo-RL's container
    installs them, at the pinned versions."""
    prefix = prefix or sys.prefix
    file = Path(prefix) / SOURCES_FILE
    if not file.exists():
        installed, why = _installed()
        if installed or why:
            return installed, why
        return None, (
            f"the pinned Megatron-LM and Megatron-Bridge sources are not installed in this "
            f"environment ({prefix}): run {ENV_SCRIPT} MEGATRON_LM MEGATRON_BRIDGE {prefix}"
        )
    found = json.loads(file.read_text())
    roots = {}
    for name, commit in PINNED.items():
        entry = found.get(name, {})
        if entry.get("commit") != commit:
            return None, f"{file}: {name} is at {entry.get('commit')}, not the pinned {commit}"
        if not Path(entry.get("path", "")).is_dir():
            return None, f"{file}: {name}'s folder {entry.get('path')!r} is gone"
        roots[name] = str(Path(entry["path"]) / IMPORT_ROOT[name])
    return roots, ""


def _package_version(package_info: Path) -> str:
    """`__version__` of a Megatron package_info.py, read without importing it."""
    if not package_info.exists():
        return "?"
    values = dict(
        re.findall(
            r"^(MAJOR|MINOR|PATCH|PRE_RELEASE) = ['\"]?(\w*)", package_info.read_text(), re.M
        )
    )
    return "{MAJOR}.{MINOR}.{PATCH}{PRE_RELEASE}".format(**values) if len(values) == 4 else "?"


def _installed() -> tuple[dict[str, str] | None, str]:
    """The import roots of megatron.core and megatron.bridge where this environment has them
    (NeMo-RL's container), when both are at the pinned versions; (None, '') where absent."""
    roots = {}
    for name, (package, version) in INSTALLED.items():
        try:
            spec = importlib.util.find_spec(package)
        except ImportError:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None, ""
        folder = Path(next(iter(spec.submodule_search_locations)))
        have = _package_version(folder / "package_info.py")
        if have != version:
            return None, (
                f"{package} {have} is installed here, not NeMo-RL v0.4.0's pin {version} "
                f"({name} {PINNED[name][:7]})"
            )
        roots[name] = str(folder.parent.parent)  # the folder holding megatron/
    return roots, ""


def hf_config(model_name: str) -> dict[str, Any]:
    """The `config.json` the import reads: the local model's own, else one built from the
    architecture table (no download)."""
    local = Path(model_name)
    if local.is_dir() and (local / "config.json").exists():
        return json.loads((local / "config.json").read_text())
    arch = resolve_architecture(model_name, "policy.model_name")
    family = "qwen3" if arch.qk_norm else "llama"
    return {
        **FAMILY_HF[family],
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "intermediate_size": arch.intermediate_size,
        "vocab_size": arch.vocab_size,
        "tie_word_embeddings": arch.tied_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "bfloat16",
    }


def job(cfg: dict[str, Any]) -> dict[str, Any]:
    """What the child needs for one config: the policy section as grpo.setup() hands it to
    the worker (train_iters set as setup sets it, from grpo.max_num_steps), the world size and
    the model's config.json. Of `policy.generation`, the worker reads only
    `colocated.enabled` before the model build (its other keys at generation time), so only
    that goes in: a generation-only override then reuses the cached verdict."""
    policy = json.loads(json.dumps(cfg["policy"]))
    policy["megatron_cfg"]["train_iters"] = cfg["grpo"]["max_num_steps"]
    colocated = policy["generation"]["colocated"]["enabled"]
    policy["generation"] = {"colocated": {"enabled": colocated}}
    return {
        "policy": policy,
        "world_size": policy_world_size(cfg),
        "hf_config": hf_config(policy["model_name"]),
    }


def check_many(cfgs: list[dict[str, Any]], timeout_s: int = 1200) -> list[str]:
    """Each config's verdict, in one child process: 'PASS (...)', 'FAIL key=value: why'.
    Raises ContractError when the sources are missing or the child itself breaks."""
    found, why = sources()
    if found is None:
        raise ContractError(why)
    paths = [found["Megatron-LM"], found["Megatron-Bridge"]]
    jobs = [job(cfg) for cfg in cfgs]
    return checked("megatron-worker", __name__, [Path(__file__)], jobs, paths, timeout_s)


def run(cfg: dict[str, Any]) -> str:
    """The phase as the rehearsal prints it: 'PASS (...)' or 'SKIPPED (why)'; raises
    ContractError naming the key on a failure."""
    dtensor = not cfg["policy"]["megatron_cfg"].get("enabled", False)
    skipped = "megatron_cfg disabled: a DTensor policy" if dtensor else None
    return phase(cfg, skipped, sources, check_many)


# ------------------------------------------------------------------------ the child's side


class _ReachedModelBuild(Exception):
    """setup_megatron_model was called: everything before it passed."""


def _placeholder(*_: Any, **__: Any) -> None:
    raise RuntimeError("darling-nemo contract placeholder: not available on CPU")


def _module(name: str, **attrs: Any) -> Any:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _placeholders_for_missing_megatron_lm() -> None:
    """The worker module imports two Megatron-LM modules outside megatron/core."""
    for name, attr in (
        ("megatron.training.utils", "get_ltor_masks_and_position_ids"),
        ("megatron.inference.text_generation.mcore_engine_server", "run_mcore_engine"),
    ):
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            continue
        parts = name.split(".")
        for depth in range(2, len(parts)):
            parent = ".".join(parts[:depth])
            if parent not in sys.modules:
                _module(parent)
        _module(name, **{attr: _placeholder})


class _TEFusedAdam:
    """Transformer Engine 2.5.0's FusedAdam as Megatron inspects it (its keyword arguments)."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        *,
        master_weight_dtype: Any = None,
        exp_avg_dtype: Any = None,
        exp_avg_sq_dtype: Any = None,
        use_decoupled_grad: bool = False,
        store_param_remainders: bool = False,
    ) -> None:
        _placeholder()


def _transformer_engine_answers() -> None:
    """Only where TE cannot be imported (a CPU machine; NeMo-RL's container has it)."""
    try:
        import transformer_engine  # noqa: F401

        return
    except Exception:  # ImportError, or its CUDA libraries missing on a CPU-only node
        pass
    import megatron.core.models.common.embeddings.rope_utils as rope_utils

    rope_utils.fused_apply_rotary_pos_emb = _placeholder
    rope_utils.fused_apply_rotary_pos_emb_thd = _placeholder
    _module("transformer_engine", __version__=TE_VERSION)
    _module("transformer_engine.pytorch")
    _module("transformer_engine.pytorch.optimizers", FusedAdam=_TEFusedAdam)


def _config_only_import(model_dir: Path) -> Any:
    def import_model_from_hf_name(
        hf_model_name: str, output_path: str, megatron_config: Any = None, **overrides: Any
    ) -> None:
        from megatron.bridge import AutoBridge
        from megatron.bridge.training.config import (
            CheckpointConfig,
            ConfigContainer,
            LoggerConfig,
            OptimizerConfig,
        )

        bridge = AutoBridge.from_hf_pretrained(str(model_dir), trust_remote_code=True, **overrides)
        provider = bridge.to_megatron_provider(load_weights=False)
        # as Megatron-Bridge's save_megatron_model writes it, without the weights
        container = ConfigContainer(
            model=provider,
            train=None,
            optimizer=OptimizerConfig(use_distributed_optimizer=False),
            ddp=None,
            scheduler=None,
            dataset=None,
            logger=LoggerConfig(),
            tokenizer=None,
            checkpoint=CheckpointConfig(
                async_save=False, save=output_path, save_optim=False, save_rng=False
            ),
            dist=None,
        )
        iteration = Path(output_path) / "iter_0000000"
        iteration.mkdir(parents=True, exist_ok=True)
        container.to_yaml(str(iteration / "run_config.yaml"))

    return import_model_from_hf_name


# An exception message -> the key it is about (first match wins; world size first, as its
# message names TP, PP and CP too).
KEY_RULES = (
    (re.compile(r"world size|world_size", re.I), "cluster"),
    (re.compile(r"Context Parallel|context_parallel", re.I), "context_parallel_size"),
    (re.compile(r"tensor_model_parallel_size|tensor parallel", re.I), "tensor_model_parallel_size"),
    (re.compile(r"pipeline", re.I), "pipeline_model_parallel_size"),
    (re.compile(r"distributed optimizer", re.I), "optimizer.use_distributed_optimizer"),
    (re.compile(r"offload", re.I), "optimizer.optimizer_offload_fraction"),
    (re.compile(r"defer_fp32_logits", re.I), "defer_fp32_logits"),
)
UNEXPECTED_KWARG = re.compile(
    r"(OptimizerConfig|SchedulerConfig)\.__init__\(\) got an unexpected keyword argument '(\w+)'"
)


def name_the_key(err: BaseException, policy: dict[str, Any], world_size: int) -> str:
    """`key=value: message [source:line]` for a failure of the worker's configuration path."""
    message = " ".join(str(err).split()) or type(err).__name__
    frame = traceback.extract_tb(err.__traceback__)[-1]
    where = frame.filename.split("/megatron/", 1)[-1] if "/megatron/" in frame.filename else ""
    where = f"megatron/{where}" if where else Path(frame.filename).name
    source = f" [{where}:{frame.lineno}]"
    mcfg = policy["megatron_cfg"]
    unexpected = UNEXPECTED_KWARG.search(message)
    if unexpected:
        section = "optimizer" if unexpected[1] == "OptimizerConfig" else "scheduler"
        key = f"policy.megatron_cfg.{section}.{unexpected[2]}"
        return f"{key}: {unexpected[1]} has no such field (a typo?){source}"
    for pattern, key in KEY_RULES:
        if pattern.search(message):
            if key == "cluster":
                return f"cluster (the policy's {world_size} GPUs): {message}{source}"
            return f"policy.megatron_cfg.{key}={lookup(mcfg, key)!r}: {message}{source}"
    layout = (
        f"TP {mcfg['tensor_model_parallel_size']} PP {mcfg['pipeline_model_parallel_size']} "
        f"CP {mcfg['context_parallel_size']}, world size {world_size}"
    )
    return f"policy.megatron_cfg ({layout}): {message}{source}"


def _check_one(worker_class: Any, module: Any, one: dict[str, Any], workdir: Path) -> str:
    import torch

    policy, world_size = one["policy"], one["world_size"]
    model_dir = model_folder(workdir, one["hf_config"])
    os.environ.update(
        WORLD_SIZE=str(world_size),
        RANK="0",
        LOCAL_RANK="0",
        NRL_MEGATRON_CHECKPOINT_DIR=str(workdir / "megatron"),
    )
    torch.distributed.init_process_group = lambda *_, **__: None
    module.import_model_from_hf_name = _config_only_import(model_dir)

    def setup_megatron_model(**_: Any) -> None:
        raise _ReachedModelBuild

    module.setup_megatron_model = setup_megatron_model
    worker = worker_class.__new__(worker_class)
    tokenizer = types.SimpleNamespace(pad_token="<pad>", eos_token="</s>")
    failed = stopped_at(
        lambda: worker_class.__init__(
            worker,
            policy,
            tokenizer,
            worker_sharding_annotations=None,
            pre_init_communication_queue=None,
        ),
        _ReachedModelBuild,
        lambda err: name_the_key(err, policy, world_size),
        "setup_megatron_model",
    )
    if failed is not None:
        return failed
    container, model = worker.megatron_cfg, worker.megatron_cfg.model
    opt = container.optimizer
    return (
        f"PASS ({policy['model_name']}: {type(model).__name__}, {model.num_layers} layers, "
        f"{model.num_attention_heads} heads; {world_size} GPUs = TP "
        f"{model.tensor_model_parallel_size} x PP {model.pipeline_model_parallel_size} x CP "
        f"{model.context_parallel_size} x DP {container.data_parallel_size}, SP "
        f"{model.sequence_parallel}; optimizer {opt.optimizer} (distributed "
        f"{opt.use_distributed_optimizer}, precision-aware {opt.use_precision_aware_optimizer}); "
        f"params {str(model.params_dtype).removeprefix('torch.')}; validate() passed)"
    )


def main(argv: list[str]) -> int:
    _placeholders_for_missing_megatron_lm()
    from nemo_rl.models.policy import megatron_policy_worker as module

    _transformer_engine_answers()
    worker_class = module.MegatronPolicyWorker.__ray_metadata__.modified_class
    return check_jobs(
        argv,
        "darling-megatron-",
        lambda one, workdir: _check_one(worker_class, module, one, workdir),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
