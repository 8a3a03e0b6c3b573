"""Classifier contract: the pair-classifier servers' command line as the job would run it,
parsed and checked by vLLM 0.10.0's own `serve` parser and engine config on CPU, and the
`/classify` request and reply of the served judge checked against vLLM 0.10.0's protocol
classes (docs/contracts.md).

Which command line: with `darling.judge.launch` the recipe's own server
(`judges.node_server.server_command`); otherwise the one `darling-serve-classifiers` runs on
the classifier node of the `.sub` jobs (`serve_classifiers.server_commands`, with the model
the launcher serves: `CLASSIFIER_MODEL` when set, as slurm/train.sh reads it, else the
reference classifier of `darling.judge.template`). The model is its `config.json` alone (the
local folder's own, or one built from the package's architecture table): vLLM resolves the
architecture to the class it would load and the contract refuses what it cannot classify
with a trained head (a bare `Qwen3Model` resolves only to vLLM's Transformers fallback with a
new, untrained score layer), a head without 2 labels (the judge reads P(similar) as
`probs[-1]` of label 1), a server whose `max_model_len` is below the template's budget, and
a causal classifier served without prefix caching (vLLM 0.10.0 turns it on for a classify
server only with LAST pooling: `judges.serve_flags`); a bidirectional one (ModernBERT) has
no prefix to reuse, and its verdict says caching is off. The command line must carry
`--middleware darling_nemo.judges.auth.BearerTokenAuth` (the job's token on every request),
parsed by vLLM's parser into the list its server applies, and the path must import to a
class (vLLM adds a class with `app.add_middleware`).

Replaced, besides what contract_vllm replaces (the GPU, `vllm._C`): flash-attention's
Triton rotary kernel, which vLLM's model modules import and only a forward pass uses, and
vLLM's import-time CUTLASS capability queries (answered "unsupported"; no kernel is chosen
here). Rehearsal-only: nothing here runs in a real training run.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import shlex
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from darling_nemo.judges import node_server
from darling_nemo.judges.auth import MIDDLEWARE, TOKEN_ENV, new_token
from darling_nemo.judges.served_wire import classify_payload, parse_reply
from darling_nemo.plan import resolve_architecture
from darling_nemo.rehearsal.contract_child import (
    ContractError,
    check_jobs,
    checked,
    model_folder,
    phase,
)
from darling_nemo.rehearsal.contract_vllm import gpu_stand_ins, sources
from darling_nemo.schema import PAIR_TEMPLATES, ClassifierServersConfig, ServedJudgeConfig
from darling_nemo.schema.darling import validate_darling
from darling_nemo.serve_classifiers import server_commands

PACKAGE = Path(__file__).parents[1]
# what a verdict depends on besides the job: cached verdicts are redone when one changes
CODE = [
    Path(__file__),
    PACKAGE / "rehearsal" / "contract_vllm.py",
    PACKAGE / "judges" / "served.py",
    PACKAGE / "judges" / "served_wire.py",
    PACKAGE / "classify_server.py",
    PACKAGE / "judges" / "serve_flags.py",
    PACKAGE / "judges" / "auth.py",
]
LABELS = 2  # label 1 = similar; the served judge reads probs[-1]
PROBE_PROBS = [0.25, 0.75]


def classifier_hf_config(model: str, key: str) -> dict[str, Any]:
    """The classifier's `config.json`: the local folder's own, else one built from the
    architecture table (ModernBERT or Qwen3 with a sequence-classification head)."""
    local = Path(model)
    if local.is_dir() and (local / "config.json").exists():
        return json.loads((local / "config.json").read_text())
    arch = resolve_architecture(model, key)
    labels = {"id2label": {str(k): f"LABEL_{k}" for k in range(arch.num_labels or LABELS)}}
    common = {
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "intermediate_size": arch.intermediate_size,
        "vocab_size": arch.vocab_size,
        "max_position_embeddings": arch.max_positions,
        **labels,
    }
    if arch.encoder:
        return {
            "architectures": ["ModernBertForSequenceClassification"],
            "model_type": "modernbert",
            "torch_dtype": "float32",
            **common,
        }
    return {
        "architectures": ["Qwen3ForSequenceClassification"],
        "model_type": "qwen3",
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "tie_word_embeddings": arch.tied_embeddings,
        "hidden_act": "silu",
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
        **common,
    }


def job(cfg: dict[str, Any]) -> dict[str, Any] | str:
    """What the child checks for one config, or why there is nothing to check."""
    judge = validate_darling(cfg.get("darling")).judge
    if not isinstance(judge, ServedJudgeConfig):
        return f"judge {judge.kind!r} starts no classifier server"
    if judge.launch is not None:
        where, prefix = "the recipe's own server", "darling.judge.launch"
        model, model_key = judge.launch.model, f"{prefix}.model"
        argv = node_server.server_command(judge.launch)[1]
        executable, extra_args = judge.launch.executable, judge.launch.extra_args
        max_len = judge.launch.max_model_len
        max_len_key = f"{prefix}.max_model_len={max_len}" if max_len is not None else None
    else:
        where, prefix = "darling-serve-classifiers (the .sub jobs)", "darling-serve-classifiers"
        if os.environ.get("CLASSIFIER_MODEL"):
            model, model_key = os.environ["CLASSIFIER_MODEL"], "CLASSIFIER_MODEL"
        else:
            model = PAIR_TEMPLATES[judge.template].reference_model
            model_key = f"darling.judge.template={judge.template} (its reference classifier)"
        servers = ClassifierServersConfig(model=model, gpus=[0])
        argv = server_commands(servers)[0][1]
        executable, extra_args, max_len_key = servers.executable, servers.extra_args, None
    if Path(shlex.split(executable)[0]).name != "vllm":
        return f"{prefix}.executable is {executable!r}, not vLLM"
    serve_args = argv[argv.index("serve") + 1 :]
    command_key = f"{prefix}: `vllm serve {shlex.join(serve_args)}`"
    extra_key = f"{prefix}.extra_args={extra_args}" if extra_args else None
    return {
        "where": where,
        "command_key": command_key,
        "extra_key": extra_key,
        "max_len_key": max_len_key or extra_key,
        "model": model,
        "model_key": model_key,
        "serve_args": serve_args,
        "hf_config": classifier_hf_config(model, model_key),
        "judge_max_length": judge.max_length or PAIR_TEMPLATES[judge.template].max_length,
        "template": judge.template,
        "causal": not resolve_architecture(model, model_key).encoder,
    }


def check_many(cfgs: list[dict[str, Any]], timeout_s: int = 1200) -> list[str]:
    """Each config's verdict, in one child process: 'PASS (...)', 'SKIPPED (why)' or
    'FAIL key=value: why'."""
    paths, why = sources()
    if paths is None:
        raise ContractError(why)
    jobs = [job(cfg) for cfg in cfgs]
    todo = [one for one in jobs if isinstance(one, dict)]
    verdicts = iter(checked("classifier", __name__, CODE, todo, paths, timeout_s))
    return [next(verdicts) if isinstance(one, dict) else f"SKIPPED ({one})" for one in jobs]


def run(cfg: dict[str, Any]) -> str:
    """The phase as the rehearsal prints it: 'PASS (...)' or 'SKIPPED (why)'; raises
    ContractError naming the key on a failure."""
    one = job(cfg)
    return phase(cfg, one if isinstance(one, str) else None, sources, check_many)


# ------------------------------------------------------------------------ the child's side


class _Refused(Exception):
    pass


def _model_stand_ins() -> None:
    """What vLLM's model modules ask of CUDA and Triton at import time."""
    import vllm._custom_ops as ops

    for name in dir(ops):
        if name.startswith("cutlass_") and "supports" in name:
            setattr(ops, name, lambda *_, **__: False)
    rotary = types.ModuleType("vllm.vllm_flash_attn.layers.rotary")
    rotary.apply_rotary_emb = None  # type: ignore[attr-defined]  # a forward pass's kernel
    sys.modules.setdefault(rotary.__name__, rotary)


def check_protocol(model: str) -> str:
    """'' when the served judge's /classify request, its reading of vLLM's reply and
    darling_nemo.classify_server's reply all match vLLM 0.10.0's protocol classes; else why."""
    from vllm.entrypoints.openai.protocol import (
        ClassificationData,
        ClassificationRequest,
        ClassificationResponse,
        UsageInfo,
    )

    from darling_nemo.classify_server import classify_body

    payload = classify_payload(["[CLS] a [SEP] b [SEP]"], model)
    unknown = sorted(set(payload) - set(ClassificationRequest.model_fields))
    if unknown:
        return f"the served judge's /classify request has fields vLLM 0.10.0 ignores: {unknown}"
    ClassificationRequest.model_validate(payload)
    reply = ClassificationResponse(
        model=model,
        data=[ClassificationData(index=0, label="LABEL_1", probs=PROBE_PROBS, num_classes=2)],
        usage=UsageInfo(prompt_tokens=7, total_tokens=7),
    )
    if parse_reply(reply.model_dump_json(), 1) != [PROBE_PROBS[-1]]:
        return "the served judge does not read P(similar) as probs[-1] of vLLM 0.10.0's reply"

    classifier = types.SimpleNamespace(id2label={0: "LABEL_0", 1: "LABEL_1"})
    ours = classify_body(classifier, model, [[1] * 7], np.array([PROBE_PROBS]))  # type: ignore[arg-type]
    ClassificationResponse.model_validate(ours)
    fields = set(ours["data"][0])
    if fields != set(ClassificationData.model_fields):
        return f"classify_server's reply items have {sorted(fields)}, vLLM 0.10.0's differ"
    return ""


ENGINE_CHOICE = {"VLLM_USE_V1": os.environ.get("VLLM_USE_V1")}


def _check_one(one: dict[str, Any], workdir: Path) -> str:
    import vllm.envs as vllm_envs
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils import FlexibleArgumentParser

    model_dir = model_folder(workdir, one["hf_config"])
    args_key = one["command_key"]
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))

    def refuse(message: str) -> None:
        raise _Refused(message)

    parser.error = refuse  # type: ignore[method-assign]  # argparse would print and exit
    try:
        args = parser.parse_args([str(model_dir), *one["serve_args"][1:]])
        validate_parsed_serve_args(args)
    except (_Refused, TypeError, ValueError) as err:
        return f"FAIL {one['extra_key'] or args_key}: vLLM 0.10.0's serve parser: {err}"
    if middleware := middleware_problem(getattr(args, "middleware", None)):
        return f"FAIL {args_key}: {middleware}"
    args.model = args.model_tag  # as `vllm serve` does
    # vLLM picks its V0 or V1 engine per process and records the choice in the environment;
    # each server is its own process, so each job starts from the child's starting state.
    for name, value in ENGINE_CHOICE.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER
        )
        model_config = config.model_config
        resolved = get_model_architecture(model_config)[1]
        engine = "V1" if vllm_envs.VLLM_USE_V1 else "V0"
    except Exception as err:  # any refusal of the server's configuration is the verdict
        message = " ".join(str(err).split())[:400] or type(err).__name__
        return f"FAIL {args_key}: {message}"
    architecture = (one["hf_config"].get("architectures") or ["(none)"])[0]
    model_key = f"{one['model_key']}={one['model']}"
    if model_config.task != "classify":
        return f"FAIL {args_key}: vLLM 0.10.0 serves task {model_config.task!r}, not classify"
    if resolved.startswith("Transformers"):
        return (
            f"FAIL {model_key}: vLLM 0.10.0 cannot classify architecture {architecture}: it "
            f"has no vLLM classification model and falls back to {resolved} with a new, "
            "untrained score layer (a DARLING classifier is XForSequenceClassification with "
            f"{LABELS} labels)"
        )
    labels = model_config.hf_config.num_labels
    if labels != LABELS:
        return (
            f"FAIL {model_key}: config.json has {labels} label(s); the judge reads "
            f"P(similar) as probs[-1] of {LABELS} labels (label 1 = similar)"
        )
    if model_config.max_model_len < one["judge_max_length"]:
        return (
            f"FAIL {one['max_len_key'] or model_key}: the server's max_model_len {model_config.max_model_len} is below the "
            f"{one['template']} template's budget of {one['judge_max_length']} tokens "
            "(darling.judge.max_length): long pairs would get HTTP 400"
        )
    caching = prefix_caching(one, config, args_key)
    if caching.startswith("FAIL"):
        return caching
    served = args.served_model_name[0] if args.served_model_name else args.model
    if protocol := check_protocol(served):
        return f"FAIL darling.judge: {protocol}"
    how = "vLLM's own" if resolved == architecture else f"{resolved} + vLLM's classify adapter"
    return (
        f"PASS ({one['model']} as {one['where']} serve it: {architecture} ({how}), "
        f"{labels} labels, task classify on the {engine} engine, max_model_len {model_config.max_model_len} >= "
        f"the judge's {one['judge_max_length']}, dtype "
        f"{str(model_config.dtype).removeprefix('torch.')}, {caching}, the job's token "
        "checked by --middleware; /classify request and reply match vLLM 0.10.0's protocol)"
    )


def middleware_problem(parsed: Any) -> str:
    """'' when vLLM's parsed `--middleware` list holds the token middleware and its import
    path resolves to a class, as vLLM 0.10.0's build_app imports it; else why not."""
    if not isinstance(parsed, list):
        return "vLLM 0.10.0's serve parser has no --middleware list"
    if MIDDLEWARE not in parsed:
        return (
            f"the server has no `--middleware {MIDDLEWARE}`: it would answer /classify "
            "without the job's token"
        )
    module, name = MIDDLEWARE.rsplit(".", 1)
    # the job's server holds a token; without one the name stops the process (judges/auth.py)
    had = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = had or new_token()
    try:
        imported = getattr(importlib.import_module(module), name, None)
    finally:
        if had is None:
            del os.environ[TOKEN_ENV]
    if not inspect.isclass(imported):
        return f"--middleware {MIDDLEWARE} does not import to a class"
    return ""


def prefix_caching(one: dict[str, Any], config: Any, args_key: str) -> str:
    """What the engine config does with prefix caching: a verdict part, or 'FAIL key: why'
    for a causal classifier left without it (every pair recomputes `CLS a SEP`)."""
    caching = bool(config.cache_config.enable_prefix_caching)
    chunked = bool(config.scheduler_config.chunked_prefill_enabled)
    pooler = config.model_config.pooler_config
    pooling = getattr(pooler, "pooling_type", None)
    if not one["causal"]:
        state = "on" if caching else "off"
        return f"prefix caching {state} (a bidirectional encoder: no prefix to reuse)"
    if not caching:
        return (
            f"FAIL {one['extra_key'] or args_key}: vLLM 0.10.0 serves this causal classifier "
            f"without prefix caching (enable_prefix_caching=False, pooling_type={pooling}): "
            "pairs sharing a first response recompute its `CLS a SEP`; serve it with "
            '--override-pooler-config \'{"pooling_type":"LAST"}\' and without '
            "--no-enable-prefix-caching"
        )
    return (
        f"prefix caching on, chunked prefill {'on' if chunked else 'off'} (pooling_type {pooling})"
    )


def main(argv: list[str]) -> int:
    gpu_stand_ins()
    _model_stand_ins()
    return check_jobs(argv, "darling-classifier-", _check_one)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
