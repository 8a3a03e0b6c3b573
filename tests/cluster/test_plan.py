"""darling-plan: hand-computed small cases, NeMo-RL's own 8B/70B layouts, the project's configs.

Byte counts in the comments are worked out by hand from the formulas in darling_nemo/plan/
(and its docstrings say where each formula comes from in NeMo-RL / Megatron / vLLM).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import REPO, saved_decoder_config
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo import plan
from darling_nemo.config import load_config
from darling_nemo.plan.layout import optional, required
from darling_nemo.schema import ConfigError, ServedJudgeConfig

GIB = 1024**3
H100 = plan.STANDARD_GPUS["80 GB (H100)"]
H200 = plan.STANDARD_GPUS["141 GB (H200)"]
FIXED_MEGATRON = (plan.CUDA_CONTEXT_GIB + plan.MEGATRON_RUNTIME_GIB) * GIB  # 2.1 GiB
FIXED_VLLM_ASLEEP = (
    plan.CUDA_CONTEXT_GIB + plan.VLLM_RUNTIME_GIB + plan.VLLM_CUDA_GRAPHS_GIB
) * GIB  # 2.6 GiB

# A tiny Llama-like model: h 64, 4 layers, 4 heads x 16 (q_dim 64), 2 KV heads (kv_dim 32),
# MLP 128, vocab 1000, untied embeddings.
TINY = plan.Architecture("tiny", 64, 4, 4, 2, 16, 128, 1000, False)


def nemo_rl_config(**changes) -> dict:
    """The memory-relevant keys of a NeMo-RL v0.4.0 Megatron GRPO config.

    Defaults restate examples/configs/grpo_math_1B_megatron.yaml (v0.4.0): sequence packing
    on, distributed optimizer (Adam), grad_reduce_in_fp32 false, activation checkpointing
    and sequence parallel off, vLLM colocated at gpu_memory_utilization 0.6.
    """
    cfg = {
        "policy": {
            "model_name": "tiny",
            "precision": "bfloat16",
            "train_global_batch_size": 8,
            "train_micro_batch_size": 1,
            "logprob_batch_size": 1,
            "max_total_sequence_length": 32,
            "sequence_packing": {"enabled": False},
            "dynamic_batching": {"enabled": False},
            "megatron_cfg": {
                "enabled": True,
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "context_parallel_size": 1,
                "sequence_parallel": False,
                "activation_checkpointing": False,
                "optimizer": {"optimizer": "adam", "use_distributed_optimizer": True},
                "distributed_data_parallel_config": {"grad_reduce_in_fp32": False},
            },
            "generation": {
                "backend": "vllm",
                "vllm_cfg": {
                    "tensor_parallel_size": 1,
                    "gpu_memory_utilization": 0.5,
                    "max_model_len": 32,
                },
            },
        },
        "cluster": {"num_nodes": 1, "gpus_per_node": 2},
    }
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return cfg


@pytest.fixture
def tiny_model(monkeypatch):
    monkeypatch.setitem(plan.KNOWN_MODELS, "tiny", TINY)


def terms(phase: plan.Phase) -> dict[str, float]:
    return {t.label: t.bytes for t in phase.terms}


def phase(p: plan.Plan, name: str, where: str = "") -> plan.Phase:
    return next(ph for ph in p.phases if ph.name == name and where in ph.where)


# ---------------------------------------------------------------------------------------------
# Model shapes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("Qwen/Qwen3-4B-Base", 4_022_468_096),
        ("Qwen/Qwen3-14B-Base", 14_768_307_200),
        ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
        ("meta-llama/Llama-3.3-70B-Instruct", 70_553_706_496),
    ],
)
def test_parameter_counts_match_published(name, published):
    assert plan.KNOWN_MODELS[name].total_params == published


def test_tiny_parameter_count_by_hand():
    # layer: attention 64x64 (q) + 2 x 64x32 (k, v) + 64x64 (o) = 12,288; MLP 3 x 64 x 128 =
    # 24,576; two norms 128 -> 36,992. 4 layers = 147,968; embedding 64,000; LM head 64,000 +
    # final norm 64 -> 276,032.
    assert TINY.layer_params == 36_992
    assert TINY.total_params == 276_032


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_config_json_counts_equal_a_real_transformers_model(tmp_path, family):
    """A config.json written by transformers gives the parameter count torch reports."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sizes = dict(hidden_size=64, num_hidden_layers=3, intermediate_size=96, vocab_size=500)
    if family == "llama":
        config = saved_decoder_config(tmp_path, transformers.LlamaConfig, **sizes)
        model_cls = transformers.LlamaForCausalLM
    else:  # head_dim x heads != hidden
        config = saved_decoder_config(tmp_path, transformers.Qwen3Config, head_dim=32, **sizes)
        model_cls = transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = model_cls(config)
    arch = plan.architecture_from_hf_config(tmp_path)
    assert arch.total_params == sum(p.numel() for p in model.parameters())
    assert arch.qk_norm == (family == "qwen3")


def test_model_resolution_errors(tmp_path):
    with pytest.raises(
        ConfigError, match=r"policy\.model_name: unknown model 'acme/x'.*--model-config"
    ):
        plan.resolve_architecture("acme/x", "policy.model_name")
    # A local path that is not mounted here still resolves by its last component.
    arch = plan.resolve_architecture("/models/Llama-3.3-70B-Instruct", "policy.model_name")
    assert arch.total_params == 70_553_706_496
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ConfigError, match=r"config\.json: missing num_hidden_layers"):
        plan.resolve_architecture(str(tmp_path), "policy.model_name")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json:1: invalid JSON"):
        plan.resolve_architecture(str(tmp_path), "policy.model_name")


# ---------------------------------------------------------------------------------------------
# Hand-computed phases
# ---------------------------------------------------------------------------------------------


def test_training_tp1_pp1_by_hand(tiny_model):
    p = plan.make_plan(nemo_rl_config(), capacity_gib=80)
    t = terms(phase(p, "training"))
    # 276,032 params on the GPU (PP 1, TP 1).
    assert t["parameters"] == 276_032 * 2  # bf16
    assert t["gradients"] == 276_032 * 2  # bf16 grad buffer (grad_reduce_in_fp32 false)
    # Adam: fp32 master + m + v = 12 B, sharded over DP 2 (2 GPUs / TP 1 / PP 1).
    assert t["optimizer"] == 276_032 * 12 / 2
    # Per token per layer: 2 B x (4h + 2 q_dim + 2 kv_dim + 3 ffn) = 2 x (256 + 128 + 64 + 384)
    # = 1,664 B; 1 micro-batch x 4 layers x 32 tokens = 212,992 B.
    assert t["activations"] == 1 * 4 * 32 * 1_664
    # Logits: 32 tokens x 1,000 vocab x 12 B (fp32 logits + two fp32 temporaries).
    assert t["logits"] == 32 * 1000 * 12
    assert t["Megatron runtime"] == FIXED_MEGATRON
    assert t["vLLM asleep"] == FIXED_VLLM_ASLEEP


def test_training_tp2_pp2_by_hand(tiny_model):
    cfg = nemo_rl_config(
        policy__megatron_cfg__tensor_model_parallel_size=2,
        policy__megatron_cfg__pipeline_model_parallel_size=2,
        cluster__gpus_per_node=8,  # 8 GPUs / (TP 2 x PP 2) = DP 2
    )
    p = plan.make_plan(cfg, capacity_gib=80)
    first = terms(phase(p, "training", "first"))
    last = terms(phase(p, "training", "last"))
    # First stage: 2 layers + embedding = 73,984 + 64,000 = 137,984, / TP 2 = 68,992.
    assert first["parameters"] == 68_992 * 2
    assert first["optimizer"] == 68_992 * 12 / 2
    # No sequence parallel: norms replicated 2 B x 4h = 512; rest 2 B x (128 + 64 + 384) / 2
    # = 576 -> 1,088 B. 1F1B: the first stage holds PP = 2 micro-batches x 2 layers x 32.
    assert first["activations"] == 2 * 2 * 32 * 1_088
    assert "logits" not in first
    # Last stage: 2 layers + LM head + final norm = 73,984 + 64,064 = 138,048 / 2 = 69,024.
    assert last["parameters"] == 69_024 * 2
    assert last["activations"] == 1 * 2 * 32 * 1_088
    assert last["logits"] == 32 * 500 * 12  # vocab / TP 2


def test_sequence_parallel_and_activation_checkpointing_by_hand(tiny_model):
    cfg = nemo_rl_config(
        policy__megatron_cfg__tensor_model_parallel_size=2,
        policy__megatron_cfg__sequence_parallel=True,
        policy__megatron_cfg__activation_checkpointing=True,
    )
    p = plan.make_plan(cfg, capacity_gib=80)
    t = terms(phase(p, "training"))
    # Full recompute keeps each layer's input: 2 B x h / TP 2 (sequence parallel) = 64 B per
    # token per layer, 4 layers x 32 tokens; plus one layer recomputed at once:
    # 2 B x (256 + 128 + 64 + 384) / 2 = 832 B x 32 tokens.
    assert t["activations"] == 4 * 32 * 64 + 32 * 832


def test_packing_tokens_and_logprob_peak_by_hand(tiny_model):
    cfg = nemo_rl_config(
        policy__sequence_packing={"enabled": True, "train_mb_tokens": 64, "logprob_mb_tokens": 128}
    )
    p = plan.make_plan(cfg, capacity_gib=80)
    assert terms(phase(p, "training"))["logits"] == 64 * 1000 * 12
    t = terms(phase(p, "logprobs"))
    # Forward only: max(one layer 128 x 1,664 = 212,992, logits 128 x 1,000 x 12 = 1,536,000).
    assert t["forward peak"] == 1_536_000
    assert t["parameters"] == 276_032 * 2


def test_deferred_fp32_logits_with_chunks_by_hand(tiny_model):
    cfg = nemo_rl_config(policy__megatron_cfg__defer_fp32_logits=True, policy__logprob_chunk_size=8)
    p = plan.make_plan(cfg, capacity_gib=80)
    # bf16 logits of all 32 tokens (2 B) + fp32 temporaries of one 8-token chunk (12 B).
    assert terms(phase(p, "training"))["logits"] == 32 * 1000 * 2 + 8 * 1000 * 12


def test_generation_kv_cache_by_hand(tiny_model):
    p = plan.make_plan(nemo_rl_config(), capacity_gib=10)
    gen = phase(p, "generation")
    claim = 0.5 * 10 * GIB
    assert terms(gen)["vLLM claim"] == claim
    # K and V: 2 x 4 layers x 2 KV heads x 16 x 2 B = 512 B per token.
    assert plan.vllm_kv_bytes_per_token(TINY, 1, 1) == 512
    # vLLM TP 4 > 2 KV heads: each GPU keeps one (replicated) head.
    assert plan.vllm_kv_bytes_per_token(TINY, 4, 1) == 256
    weights = 276_032 * 2
    profile = plan.vllm_profile_bytes(TINY, 1, plan.VLLM_PROFILE_TOKENS_LLM, plan.VLLM_MAX_NUM_SEQS)
    # 16,384 tokens x 2 B x (2h + 2q + 2kv + 3ffn = 128 + 128 + 64 + 384) + sampler 1,024 x
    # 1,000 x 4 B x 2.
    assert profile == 16_384 * 2 * 704 + 1024 * 1000 * 8
    runtime = (plan.CUDA_CONTEXT_GIB + plan.VLLM_RUNTIME_GIB + plan.VLLM_CUDA_GRAPHS_GIB) * GIB
    ok, detail = gen.extra_check
    sequences = (claim - weights - profile - runtime) / (512 * 32)
    assert ok and f"{sequences:.1f} sequences fit" in detail


def test_generation_refuses_when_kv_cache_cannot_hold_one_sequence(tiny_model):
    cfg = nemo_rl_config(policy__generation__vllm_cfg__gpu_memory_utilization=0.05)
    p = plan.make_plan(cfg, capacity_gib=40)  # 2 GiB claim < 2.6 GiB vLLM runtime alone
    ok, detail = phase(p, "generation").extra_check
    assert not ok and "vLLM refuses to start" in detail
    assert p.verdict() == (False, False)


def test_reward_model_takes_its_nodes_like_nemo_rl(tiny_model):
    reward = {
        "enabled": True,
        "model_name": "Skywork/Skywork-Reward-V2-Llama-3.1-8B",
        "batch_size": 16,
        "max_model_len": 2048,
        "resources": {"num_nodes": 1, "gpus_per_node": 8},
    }
    # 3 nodes, 1 for the reward model: the policy gets 2 x 8 (grpo.setup() in v0.4.0).
    lay = plan.read_layout(
        nemo_rl_config(cluster__num_nodes=3, cluster__gpus_per_node=8, env__reward_model=reward)
    )
    assert (lay.policy_nodes, lay.policy_gpus_per_node, lay.world_size) == (2, 8, 16)
    # One node shared: the reward model takes GPUs instead.
    reward["resources"] = {"num_nodes": 1, "gpus_per_node": 2}
    lay = plan.read_layout(nemo_rl_config(cluster__gpus_per_node=8, env__reward_model=reward))
    assert (lay.policy_nodes, lay.policy_gpus_per_node) == (1, 6)
    p = plan.make_plan(nemo_rl_config(cluster__gpus_per_node=8, env__reward_model=reward), 80)
    rm = terms(phase(p, "reward model"))
    assert (
        rm["weights"]
        == plan.KNOWN_MODELS["Skywork/Skywork-Reward-V2-Llama-3.1-8B"].total_params * 2
    )


def test_layout_errors_name_the_keys(tiny_model):
    with pytest.raises(ConfigError, match=r"not a multiple of TP 4"):
        plan.make_plan(
            nemo_rl_config(
                policy__megatron_cfg__tensor_model_parallel_size=4, cluster__gpus_per_node=6
            ),
            80,
        )
    cfg = nemo_rl_config()
    del cfg["policy"]["megatron_cfg"]["sequence_parallel"]
    with pytest.raises(ConfigError, match=r"policy\.megatron_cfg\.sequence_parallel: missing"):
        plan.make_plan(cfg, 80)
    with pytest.raises(ConfigError, match=r"megatron_cfg\.enabled: false"):
        plan.make_plan(nemo_rl_config(policy__megatron_cfg__enabled=False), 80)


def test_only_the_defaults_table_fills_absent_keys(tiny_model):
    """A key out of ABSENT_KEY_DEFAULTS plans as if it held its default; any other key that
    NeMo-RL v0.4.0 always reads is an error naming it, never a silent guess."""
    full = nemo_rl_config(
        policy__logprob_chunk_size=None,
        policy__megatron_cfg__defer_fp32_logits=False,
        policy__megatron_cfg__optimizer__optimizer_cpu_offload=False,
        policy__generation__colocated={"enabled": True, "resources": {"num_nodes": None}},
        policy__generation__vllm_cfg__pipeline_parallel_size=1,
        policy__generation__vllm_cfg__enforce_eager=False,
        env__reward_model__enabled=False,
    )
    # nemo_rl_config() leaves all of them out.
    assert plan.render(plan.make_plan(full, 80)) == plan.render(
        plan.make_plan(nemo_rl_config(), 80)
    )
    for section in ("sequence_packing", "dynamic_batching"):
        cfg = nemo_rl_config()
        del cfg["policy"][section]
        with pytest.raises(ConfigError, match=rf"policy\.{section}\.enabled: missing"):
            plan.read_layout(cfg)


def test_served_judge_classifier_is_the_templates_reference_checkpoint():
    for conf, classifier in [
        ("wildchat_llama8b_darling", "dogtooth/similarity-classifier-f168-hf"),
        ("math_qwen3_4b_darling", "dogtooth/qwen3-4b-emb-finetuned-step-70-hf"),
    ]:
        cfg = load_config(REPO / "conf" / f"{conf}.yaml")
        env = dict(line.split("=", 1) for line in plan.layout_env(cfg).splitlines())
        assert env["CFG_CLASSIFIER_MODEL"] == classifier
        served = phase(plan.make_plan(cfg, H100), "classifier")
        assert classifier in served.where
    # A judge that is not served loads no classifier.
    cfg = load_config(
        REPO / "conf" / "math_qwen3_4b_darling.yaml", ["darling.judge={kind: lexical}"]
    )
    env = dict(line.split("=", 1) for line in plan.layout_env(cfg).splitlines())
    assert env["CFG_CLASSIFIER_MODEL"] == "''"


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    ac=st.booleans(),
    sp=st.booleans(),
    tokens=st.integers(32, 4096),
)
def test_more_parallelism_or_recompute_never_costs_more(tp, pp, ac, sp, tokens):
    """Invariants: doubling TP never raises weights or activations per GPU; activation
    checkpointing never raises activations; the plan is the sum of its terms."""
    arch = plan.KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]

    def training(tp_, ac_):
        cfg = nemo_rl_config(
            policy__model_name=arch.name,
            policy__max_total_sequence_length=tokens,
            policy__megatron_cfg__tensor_model_parallel_size=tp_,
            policy__megatron_cfg__pipeline_model_parallel_size=pp,
            policy__megatron_cfg__sequence_parallel=sp,
            policy__megatron_cfg__activation_checkpointing=ac_,
            policy__generation__vllm_cfg__max_model_len=tokens,
            cluster__num_nodes=4,
            cluster__gpus_per_node=8,
            policy__train_global_batch_size=512,
        )
        return terms(phase(plan.make_plan(cfg, 80), "training", "first" if pp > 1 else ""))

    base, wider = training(tp, ac), training(tp * 2, ac)
    assert wider["parameters"] <= base["parameters"]
    assert wider["activations"] <= base["activations"]
    if not ac:
        assert training(tp, True)["activations"] <= base["activations"]


# ---------------------------------------------------------------------------------------------
# NeMo-RL v0.4.0's own Megatron configs: its layouts run on H100 80GB, so they must fit
# ---------------------------------------------------------------------------------------------


def upstream_8b() -> dict:
    # examples/configs/grpo_math_8B_megatron.yaml: Llama-3.1-8B-Instruct, 1 node x 8, TP1 PP2,
    # sequence 4,096, micro-batch 1, logprob batch 4, sequence packing, vLLM TP1 at 0.6.
    return nemo_rl_config(
        policy__model_name="meta-llama/Llama-3.1-8B-Instruct",
        policy__train_global_batch_size=512,
        policy__logprob_batch_size=4,
        policy__max_total_sequence_length=4096,
        policy__sequence_packing={
            "enabled": True,
            "train_mb_tokens": 4096,
            "logprob_mb_tokens": 16384,
        },
        policy__megatron_cfg__pipeline_model_parallel_size=2,
        policy__generation__vllm_cfg={
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.6,
            "max_model_len": 4096,
        },
        cluster={"num_nodes": 1, "gpus_per_node": 8},
    )


def upstream_70b() -> dict:
    # examples/configs/grpo_math_70B_megatron.yaml: Llama-3.3-70B-Instruct, 8 nodes x 8,
    # TP4 PP4 (DP 4), the same sequence settings, vLLM TP8 at 0.6.
    cfg = upstream_8b()
    cfg["policy"]["model_name"] = "meta-llama/Llama-3.3-70B-Instruct"
    cfg["policy"]["megatron_cfg"]["tensor_model_parallel_size"] = 4
    cfg["policy"]["megatron_cfg"]["pipeline_model_parallel_size"] = 4
    cfg["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] = 8
    cfg["cluster"] = {"num_nodes": 8, "gpus_per_node": 8}
    return cfg


@pytest.mark.parametrize("make", [upstream_8b, upstream_70b], ids=["8B", "70B"])
def test_nemo_rl_example_layouts_fit_80gb(make):
    p = plan.make_plan(make(), H100)
    fits, tight = p.verdict()
    assert fits and not tight, plan.render(p)


def test_nemo_rl_70b_numbers():
    p = plan.make_plan(upstream_70b(), H100)
    t = terms(phase(p, "training", "first"))
    # First stage: 20 layers x 855,654,400 + embedding 1,050,673,152 = 18,163,761,152 / TP 4
    # = 4,540,940,288 params: 8.46 GiB bf16 weights and as much for gradients.
    assert t["parameters"] == 4_540_940_288 * 2
    # Optimizer: x 12 B / DP 4 (64 GPUs / TP4 / PP4) = 12.69 GiB.
    assert t["optimizer"] / GIB == pytest.approx(12.69, abs=0.01)
    # Activations: 4 micro-batches x 20 layers x 4,096 tokens x 117,760 B (no sequence
    # parallel: 2 B x 4 x 8,192 replicated + 2 B x (2 x 8,192 + 2 x 1,024 + 3 x 28,672) / 4).
    assert t["activations"] == 4 * 20 * 4096 * 117_760
    # The peak is training on the first stage, with about 9 GiB left on an H100.
    worst = max((ph for ph in p.phases if not ph.reservation), key=lambda ph: ph.total)
    assert worst.name == "training"
    assert 8 * GIB < H100 * GIB - worst.total < 11 * GIB
    # Pipeline parallel 2 instead of 4 (twice the weights per GPU) does not fit 80 GB ...
    cfg = upstream_70b()
    cfg["policy"]["megatron_cfg"]["pipeline_model_parallel_size"] = 2
    assert plan.make_plan(cfg, H100).verdict()[0] is False
    # ... but fits an H200.
    assert plan.make_plan(cfg, H200).verdict()[0] is True


@pytest.fixture
def nemo_rl_examples() -> Path:
    """examples/configs of a NeMo-RL v0.4.0 checkout (skips without one)."""
    nemo_rl = pytest.importorskip("nemo_rl")
    # A source checkout on PYTHONPATH has examples/ beside the package; NEMO_RL_DIR names
    # one otherwise (an installed wheel ships no examples).
    root = Path(os.environ.get("NEMO_RL_DIR") or Path(nemo_rl.__file__).resolve().parents[1])
    if not (root / "examples" / "configs").is_dir():
        pytest.skip(f"no examples/configs under {root}: set NEMO_RL_DIR to a v0.4.0 checkout")
    return root / "examples" / "configs"


@pytest.mark.nemo_rl
@pytest.mark.parametrize("name", ["grpo_math_8B_megatron.yaml", "grpo_math_70B_megatron.yaml"])
def test_real_nemo_rl_example_files_fit_80gb(name, nemo_rl_examples):
    """Reads NeMo-RL's own YAML (defaults chain and ${mul:} included) from a checkout."""
    cfg = load_config(nemo_rl_examples / name)
    fits, tight = plan.make_plan(cfg, H100).verdict()
    assert fits and not tight


@pytest.mark.nemo_rl
def test_absent_key_defaults_are_nemo_rls_own(nemo_rl_examples):
    """The table of defaults says what v0.4.0's base GRPO example says, key by key."""
    cfg = load_config(nemo_rl_examples / "grpo_math_1B.yaml")
    # The example has no reward model and no darling section: their entries stand for that.
    not_in_example = {"env.reward_model.enabled", "darling"}
    for key, default in plan.ABSENT_KEY_DEFAULTS.items():
        if key in not_in_example:
            with pytest.raises(ConfigError, match="missing"):
                required(cfg, key)
            continue
        # null in the example is NeMo-RL's "unset", which the table resolves (num_nodes: 1).
        assert optional(cfg, key) == default, key


# ---------------------------------------------------------------------------------------------
# The project's own configs
# ---------------------------------------------------------------------------------------------


def project_configs() -> list[Path]:
    files = sorted((REPO / "conf").glob("*.yaml"))
    return [f for f in files if load_config(f).get("engine") == "nemo_rl"]


@pytest.mark.parametrize("path", project_configs(), ids=lambda p: p.stem)
def test_project_configs_fit_80gb_and_141gb(path):
    cfg = load_config(path)
    for capacity in (H100, H200):
        p = plan.make_plan(cfg, capacity)
        assert p.verdict()[0], plan.render(p)
    text = plan.render(plan.make_plan(cfg, H100))
    assert "Verdict:" in text and "[training]" in text and "[generation]" in text


def test_project_configs_cover_the_slurm_jobs():
    names = {p.stem for p in project_configs()}
    assert {
        "wildchat_llama70b_darling",
        "wildchat_llama8b_darling",
        "math_qwen3_4b_darling",
    } <= names


def test_project_70b_layout_and_launcher_facts():
    cfg = load_config(REPO / "conf" / "wildchat_llama70b_darling.yaml")
    lay = plan.read_layout(cfg)
    # 5 nodes, one of them NeMo-RL's reward model: the policy has 4 x 8 = TP4 x PP4 x DP2.
    assert (lay.policy_nodes, lay.world_size, lay.dp) == (4, 32, 2)
    assert isinstance(lay.darling.judge, ServedJudgeConfig)
    env = dict(line.split("=", 1) for line in plan.layout_env(cfg).splitlines())
    assert env["CFG_NUM_NODES"] == "5"
    assert env["CFG_GPUS_PER_NODE"] == "8"
    assert env["CFG_JUDGE_KIND"] == "served"
    assert env["CFG_CLASSIFIER_MODEL"] == "dogtooth/similarity-classifier-f168-hf"
    p = plan.make_plan(cfg, H100)
    assert {ph.name for ph in p.phases} >= {
        "training",
        "logprobs",
        "refit",
        "generation",
        "reward model",
        "classifier",
    }


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def test_cli_check_exit_codes_and_layout_file(tmp_path, capsys):
    conf = REPO / "conf" / "wildchat_llama70b_darling.yaml"
    layout = tmp_path / "layout.env"
    assert (
        plan.main([str(conf), "--gpu-memory", "79.6", "--check", "--layout-env", str(layout)]) == 0
    )
    out = capsys.readouterr().out
    assert "--gpu-memory 79.6" in out and "fits" in out
    assert "CFG_NUM_NODES=5" in layout.read_text()
    # No tensor or pipeline parallelism: 141 GB of bf16 weights per GPU.
    rc = plan.main(
        [
            str(conf),
            "policy.megatron_cfg.tensor_model_parallel_size=1",
            "policy.megatron_cfg.pipeline_model_parallel_size=1",
            "policy.megatron_cfg.sequence_parallel=false",
            "--gpu-memory",
            "79.6",
            "--check",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 3
    assert "DOES NOT FIT" in captured.out and "nothing launched" in captured.err
    # Without --check the same plan only reports.
    assert plan.main([str(conf), "policy.megatron_cfg.pipeline_model_parallel_size=1"]) == 0
    capsys.readouterr()
    assert plan.main([str(conf), "policy.no_such_key=1"]) == 2
    assert "unknown key 'policy.no_such_key'" in capsys.readouterr().err
    assert plan.main([str(conf), "--gpu-memory", "lots"]) == 2
