"""vLLM contract: the generation engine's config exactly as NeMo-RL v0.4.0's vLLM worker builds
it, checked by vLLM 0.10.0's own code on CPU (docs/contracts.md).

NeMo-RL's `VllmGenerationWorker.__init__` runs unchanged on the generation config as
`grpo.setup()` hands it over (`configure_generation_config`, `model_name`, `hf_overrides`):
its environment settings, its own patches, the engine arguments it assembles from
`vllm_cfg` and `vllm_kwargs`. Only its `_create_engine` is replaced: where it would start the
engine, `EngineArgs(**kwargs)` (the synchronous engine, as `vllm.LLM` builds them) or
`AsyncEngineArgs(**kwargs)` (`vllm_cfg.async_engine`) build vLLM's `VllmConfig` with
`create_engine_config()`, which runs vLLM's own checks of the model, parallel, cache and
scheduler settings, and the contract stops there. What else is replaced, and why:

- the GPU: a stand-in H100 platform (compute capability 9.0, 80 GiB, NVLink-connected),
  vLLM's own CUDA platform class with the device queries answered, where no CUDA device is
  visible; `vllm._C` (CUDA kernels) is an empty module where it cannot be imported;
- host memory, where it is smaller than a DGX H100's 2 TiB: vLLM refuses swap space above
  70% of it, which a 70B config on TP 8 would exceed on a small CPU machine;
- the model: its `config.json` alone (the package's architecture table or the local model's
  own), with `load_format` as NeMo-RL sets it ("dummy": no weights are read).

Runs in a child process with the vLLM 0.10.0 that containers/vllm_contract_env.sh installs
beside the NeMo-RL CPU environment, or the installed vLLM 0.10.0 in NeMo-RL's container.
Rehearsal-only: nothing here runs in a real training run.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

from darling_nemo.rehearsal import contract_child
from darling_nemo.rehearsal.contract_child import ContractError, checked
from darling_nemo.rehearsal.contract_megatron_worker import hf_config
from darling_nemo.rehearsal.shrink import lookup

VLLM_VERSION = "0.10.0"  # NeMo-RL v0.4.0's pin
SOURCES_FILE = "vllm_contract.json"  # written by containers/vllm_contract_env.sh
ENV_SCRIPT = "containers/vllm_contract_env.sh"
HOST_MEMORY = 2 * 2**40  # a DGX H100's host memory
GPU_MEMORY = 80 * 2**30


def sources(prefix: str | None = None) -> tuple[list[str] | None, str]:
    """(folders to put first on the child's path, '') where vLLM 0.10.0 is at hand, else
    (None, why not)."""
    prefix = prefix or sys.prefix
    file = Path(prefix) / SOURCES_FILE
    if file.exists():
        record = json.loads(file.read_text())
        if record.get("vllm") != VLLM_VERSION or not Path(record.get("site", "")).is_dir():
            return (
                None,
                f"{file}: not vLLM {VLLM_VERSION} in an existing folder; rerun {ENV_SCRIPT}",
            )
        return [record["site"]], ""
    try:
        installed = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None, (
            f"vLLM {VLLM_VERSION} is not installed beside this environment ({prefix}): "
            f"run {ENV_SCRIPT} {prefix}"
        )
    if installed != VLLM_VERSION:
        return None, f"vLLM {installed} is installed here, not NeMo-RL v0.4.0's pin {VLLM_VERSION}"
    return [], ""


def job(cfg: dict[str, Any]) -> dict[str, Any]:
    policy = cfg["policy"]
    return {
        "generation": json.loads(json.dumps(policy["generation"])),
        "hf_overrides": policy.get("hf_config_overrides") or {},
        "hf_config": hf_config(policy["model_name"]),
        "model_name": policy["model_name"],
    }


def check_many(cfgs: list[dict[str, Any]], timeout_s: int = 1200) -> list[str]:
    """Each config's verdict, in one child process: 'PASS (...)', 'FAIL key=value: why'."""
    paths, why = sources()
    if paths is None:
        raise ContractError(why)
    jobs = [job(cfg) for cfg in cfgs]
    return checked("vllm", __name__, [Path(__file__)], jobs, paths, timeout_s)


def run(cfg: dict[str, Any]) -> str:
    """The phase as the rehearsal prints it: 'PASS (...)' or 'SKIPPED (why)'; raises
    ContractError naming the key on a failure."""
    not_vllm = cfg["policy"]["generation"]["backend"] != "vllm"
    return contract_child.phase(
        cfg, "generation backend is not vllm" if not_vllm else None, sources, check_many
    )


# ------------------------------------------------------------------------ the child's side

GEN = "policy.generation"
UNEXPECTED_KWARG = re.compile(r"unexpected keyword argument '(\w+)'")
KEY_RULES = (
    (re.compile(r"max_model_len|max model len", re.I), "vllm_cfg.max_model_len"),
    (
        re.compile(r"gpu_memory_utilization|gpu memory utilization", re.I),
        "vllm_cfg.gpu_memory_utilization",
    ),
    (re.compile(r"tensor parallel|tensor_parallel", re.I), "vllm_cfg.tensor_parallel_size"),
    (re.compile(r"pipeline", re.I), "vllm_cfg.pipeline_parallel_size"),
    (re.compile(r"dtype|precision", re.I), "vllm_cfg.precision"),
)


def name_the_key(err: BaseException, generation: dict[str, Any]) -> str:
    """`key=value: message` for a refusal of the engine configuration."""
    message = " ".join(str(err).split()) or type(err).__name__
    # pydantic: "1 validation error for X Value error, <what> [type=..."
    value_error = re.search(r"Value error, (.*?)(?: \[type=|$)", message)
    if value_error:
        message = value_error[1]
    unexpected = UNEXPECTED_KWARG.search(message)
    if unexpected:
        key = unexpected[1]
        where = "vllm_kwargs" if key in (generation.get("vllm_kwargs") or {}) else "vllm_cfg"
        return f"{GEN}.{where}.{key}: vLLM 0.10.0's engine arguments have no such field (a typo?)"
    for pattern, key in KEY_RULES:
        if pattern.search(message):
            return f"{GEN}.{key}={lookup(generation, key)!r}: {message}"
    return f"{GEN}.vllm_cfg: {message}"


def gpu_stand_ins() -> None:
    """The GPU and host answers vLLM asks for, where this machine has no CUDA device."""
    import torch

    try:
        import vllm._C
    except Exception:  # CUDA kernels built for another torch, or no CUDA at all
        sys.modules["vllm._C"] = types.ModuleType("vllm._C")
    if torch.cuda.is_available():
        return
    import vllm.platforms
    import vllm.utils
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class StandInH100(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(9, 0)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA H100 80GB HBM3 (darling-nemo contract stand-in)"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return GPU_MEMORY

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return True

    vllm.platforms._current_platform = StandInH100()
    torch.cuda.get_device_capability = lambda *_, **__: (9, 0)  # NeMo-RL's prefix-caching test
    host = vllm.utils.get_cpu_memory()
    if host < HOST_MEMORY:
        import vllm.config

        for module in (vllm.utils, vllm.config):
            module.get_cpu_memory = lambda: HOST_MEMORY


class _ReachedEngineStart(Exception):
    """_create_engine was reached and vLLM's engine config was built."""


def _check_one(worker_class: Any, one: dict[str, Any], workdir: Path) -> str:
    from nemo_rl.models.generation import configure_generation_config

    model_dir = contract_child.model_folder(workdir, one["hf_config"])
    tokenizer = types.SimpleNamespace(pad_token_id=0, eos_token_id=1)
    generation = configure_generation_config(copy.deepcopy(one["generation"]), tokenizer)
    generation["model_name"] = str(model_dir)  # grpo.setup() sets the policy's model here
    generation["vllm_cfg"]["hf_overrides"] = one["hf_overrides"]
    vllm_cfg = generation["vllm_cfg"]
    built: dict[str, Any] = {}

    def create_engine(self: Any, llm_kwargs: dict[str, Any]) -> None:
        from vllm.config import CompilationConfig
        from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

        if vllm_cfg["async_engine"]:  # as VllmAsyncGenerationWorker._create_engine does
            if llm_kwargs.get("compilation_config"):
                llm_kwargs["compilation_config"] = CompilationConfig(
                    **llm_kwargs["compilation_config"]
                )
            built["config"] = AsyncEngineArgs(**llm_kwargs).create_engine_config()
        else:  # as vllm.LLM does
            built["config"] = EngineArgs(**llm_kwargs).create_engine_config()
        raise _ReachedEngineStart

    worker_class._create_engine = create_engine
    worker = worker_class.__new__(worker_class)
    tp, pp = vllm_cfg["tensor_parallel_size"], vllm_cfg["pipeline_parallel_size"]
    failed = contract_child.stopped_at(
        lambda: worker_class.__init__(
            worker, generation, bundle_indices=list(range(tp * pp)), fraction_of_gpus=1.0, seed=0
        ),
        _ReachedEngineStart,
        lambda err: name_the_key(err, one["generation"]),
        "_create_engine",
    )
    if failed is not None:
        return failed
    config = built["config"]
    model, parallel, cache = config.model_config, config.parallel_config, config.cache_config
    engine = "async" if vllm_cfg["async_engine"] else "sync"
    load_format = getattr(config.load_config.load_format, "value", config.load_config.load_format)
    return (
        f"PASS ({one['model_name']}: {engine} engine, max_model_len {model.max_model_len}, "
        f"dtype {str(model.dtype).removeprefix('torch.')}, TP {parallel.tensor_parallel_size} x "
        f"PP {parallel.pipeline_parallel_size}, gpu_memory_utilization "
        f"{cache.gpu_memory_utilization}, load_format {load_format}; "
        f"create_engine_config() passed)"
    )


def main(argv: list[str]) -> int:
    gpu_stand_ins()
    from nemo_rl.models.generation.vllm import vllm_worker, vllm_worker_async

    def check(one: dict[str, Any], workdir: Path) -> str:
        remote = (
            vllm_worker_async.VllmAsyncGenerationWorker
            if one["generation"]["vllm_cfg"]["async_engine"]
            else vllm_worker.VllmGenerationWorker
        )
        return _check_one(remote.__ray_metadata__.modified_class, one, workdir)

    return contract_child.check_jobs(argv, "darling-vllm-", check)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
