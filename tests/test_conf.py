"""Every NeMo-RL recipe config in conf/ loads, validates and says what it claims (no nemo_rl).

tests/nemo_rl_engine/test_nemo_rl_integration.py additionally loads each file with NeMo-RL's own loader and
validates it against NeMo-RL's MasterConfig when nemo_rl is importable.
"""

from __future__ import annotations

import pytest
import yaml
from helpers import REPO

from darling_nemo.config import load_config, load_yaml_with_defaults
from darling_nemo.nemo_rl.checks import unknown_config_keys, validate_nemo_rl_config
from darling_nemo.nemo_rl.user_env import task_section
from darling_nemo.schema import PAIR_TEMPLATES, ConfigError

CONF = REPO / "conf"
COMMON = CONF / "base" / "common.yaml"
# The NeMo-RL recipe configs (conf/local, conf/mini, conf/eval belong to other engines).
RECIPE_CONFIGS = sorted(
    p for p in CONF.glob("*.yaml") if p.name.startswith(("math_", "wildchat_", "code_tests_"))
)
RECIPE_OF = {
    "math": "darling_math.py",
    "wildchat": "darling_wildchat.py",
    "code": "darling_task.py",
}
BASE_CONFIGS = sorted((CONF / "base").glob("*.yaml"))
PAIRS = [
    ("math_qwen3_4b", "math"),
    ("math_qwen3_14b", "math"),
    ("wildchat_llama8b", "wildchat"),
    ("wildchat_llama70b", "wildchat"),
]


def test_the_expected_recipe_configs_exist():
    names = {p.stem for p in RECIPE_CONFIGS}
    for stem, _ in PAIRS:
        assert {f"{stem}_darling", f"{stem}_grpo"} <= names


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=lambda p: p.name)
def test_recipe_config_loads_and_validates(path):
    cfg = load_config(path)
    assert cfg["engine"] == "nemo_rl"
    darling = validate_nemo_rl_config(cfg, reference=load_config(COMMON))
    if cfg["task"] is not None:  # a user's task (the example's): the lexical judge, no model
        assert task_section(cfg).kind == "reward_funcs" and darling.judge.kind == "lexical"
        return
    if path.stem in RIVALS:  # outcome exploration compares answers with math-verify instead
        assert darling.calls_judge == (path.stem != "math_qwen3_4b_outcome")
        return
    # every setup serves the paper's classifier: the cluster configs on a node of its own,
    # the one-node defaults of the no-argument recipes from a server the recipe starts on
    # the node's own GPU 0 (the calibrated CPU judge when no GPU is visible)
    assert darling.judge.kind == "served"
    launch = darling.judge.launch
    assert (launch is not None) == ("_1node_" in path.name)
    if launch is not None:
        assert launch.model == PAIR_TEMPLATES[darling.judge.template].reference_model
        assert launch.needs_gpu and launch.no_gpu == "embedding"
        assert [e.url for e in darling.judge.endpoints] == [f"http://127.0.0.1:{launch.port}"]


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=lambda p: p.name)
def test_header_shows_the_command_that_runs_it(path):
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    text = "\n".join(header)
    recipe = RECIPE_OF[path.name.split("_")[0]]
    assert f"recipes/{recipe} --config conf/{path.name}" in text


@pytest.mark.parametrize("path", RECIPE_CONFIGS + BASE_CONFIGS, ids=lambda p: p.name)
def test_every_key_written_in_a_file_exists_in_the_common_base(path):
    # A recipe or family base may only change values: a key that common.yaml lacks is a
    # typo NeMo-RL would silently ignore. The darling: keys are checked too: against
    # common.yaml, except the judge section, which each family or recipe file sets whole
    # (its keys depend on its kind) and the strict schema checks (test above).
    raw = yaml.safe_load(path.read_text())
    raw.pop("defaults", None)
    raw.get("darling", {}).pop("judge", None)
    assert unknown_config_keys(raw, load_yaml_with_defaults(COMMON), skip=()) == []


def test_a_misspelled_key_in_a_yaml_fails_validation(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text(
        f"defaults: [{COMMON}, {CONF / 'base' / 'math.yaml'}]\n"
        "grpo:\n  normalise_rewards: true\n"  # misspelled: NeMo-RL would ignore it
        "darling:\n  flor: 0.0\n"
    )
    cfg = load_config(bad)
    with pytest.raises(ConfigError, match=r"darling.flor"):
        validate_nemo_rl_config(cfg, reference=load_config(COMMON))
    del cfg["darling"]["flor"]
    with pytest.raises(ConfigError, match=r"grpo.normalise_rewards: unknown key"):
        validate_nemo_rl_config(cfg, reference=load_config(COMMON))


def test_a_misspelled_override_fails():
    with pytest.raises(ConfigError, match=r"unknown key 'grpo\.normalise_rewards'"):
        load_config(CONF / "math_qwen3_4b_darling.yaml", ["grpo.normalise_rewards=false"])


def flat(cfg, prefix=""):
    for key, value in cfg.items():
        if isinstance(value, dict) and value:
            yield from flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


# The rivals of DARLING (docs/rivals.md) beside conf/math_qwen3_4b_darling.yaml, and the
# darling: keys each one changes.
RIVALS = {
    "math_qwen3_4b_passk": {"darling.method"},  # k: 4, written out, is common.yaml's
    "math_qwen3_4b_outcome": {
        "darling.method",  # outcome_coef: 0.5 likewise
        "darling.judge.kind",  # no classifier: math-verify judges the answers
        "darling.judge.endpoints",
        "darling.judge.template",
    },
    "math_qwen3_4b_gdpo": {"darling.fusion"},
}
NAMES = {
    "checkpointing.checkpoint_dir",
    "logger.log_dir",
    "logger.wandb.name",
    "logger.mlflow.run_name",
}


@pytest.mark.parametrize("stem", RIVALS)
def test_each_rival_differs_from_darling_only_in_its_darling_keys(stem):
    darling = dict(flat(load_config(CONF / "math_qwen3_4b_darling.yaml")))
    rival = dict(flat(load_config(CONF / f"{stem}.yaml")))
    differ = {k for k in darling.keys() | rival.keys() if darling.get(k) != rival.get(k)}
    assert differ - NAMES == RIVALS[stem]
    assert all(stem in str(rival[name]) for name in NAMES)


@pytest.mark.parametrize("stem", [s for s, _ in PAIRS])
def test_grpo_baseline_differs_from_darling_only_in_the_reward(stem):
    darling = dict(flat(load_config(CONF / f"{stem}_darling.yaml")))
    grpo = dict(flat(load_config(CONF / f"{stem}_grpo.yaml")))
    assert darling.keys() == grpo.keys()
    differ = {k for k in darling if darling[k] != grpo[k]}
    names = {
        "checkpointing.checkpoint_dir",
        "logger.log_dir",
        "logger.wandb.name",
        "logger.mlflow.run_name",
    }
    assert differ - names == {"grpo.normalize_rewards", "darling.enabled", "darling.normalize_std"}
    assert (grpo["grpo.normalize_rewards"], grpo["darling.enabled"]) == (True, False)


def test_math_qwen3_4b_reference_hyper_parameters():
    cfg = load_config(CONF / "math_qwen3_4b_darling.yaml")
    grpo, policy = cfg["grpo"], cfg["policy"]
    assert (grpo["num_prompts_per_step"], grpo["num_generations_per_prompt"]) == (256, 8)
    assert policy["generation"]["max_new_tokens"] == 8192
    assert cfg["data"]["max_input_seq_length"] == 1024
    assert policy["max_total_sequence_length"] == 1024 + 8192
    assert policy["megatron_cfg"]["optimizer"]["lr"] == 1e-6
    assert policy["generation"]["temperature"] == 1.0
    assert cfg["loss_fn"]["reference_policy_kl_penalty"] == 0.0
    # 4 optimizer updates per rollout batch (reference mini-batch of 64 prompts x 8)
    assert 256 * 8 // policy["train_global_batch_size"] == 4
    assert policy["model_name"] == "Qwen/Qwen3-4B-Base"
    assert load_config(CONF / "math_qwen3_14b_darling.yaml")["policy"]["model_name"] == (
        "Qwen/Qwen3-14B-Base"
    )


@pytest.mark.parametrize("stem", ["wildchat_llama8b", "wildchat_llama70b"])
def test_wildchat_reference_hyper_parameters(stem):
    cfg = load_config(CONF / f"{stem}_darling.yaml")
    grpo, policy = cfg["grpo"], cfg["policy"]
    assert (grpo["num_prompts_per_step"], grpo["num_generations_per_prompt"]) == (64, 8)
    assert policy["generation"]["max_new_tokens"] == 1024
    assert cfg["data"]["max_input_seq_length"] == 512
    assert policy["megatron_cfg"]["optimizer"]["lr"] == 1e-6
    assert cfg["loss_fn"]["reference_policy_kl_penalty"] == 0.001
    assert cfg["env"]["reward_model"]["enabled"] is True


def layout(cfg):
    """(policy GPUs, model-parallel size, data-parallel size) as NeMo-RL's setup() splits
    the cluster: with more than one node, the reward model takes whole nodes."""
    cluster, rm = cfg["cluster"], cfg["env"]["reward_model"]
    nodes = cluster["num_nodes"]
    if rm["enabled"] and nodes > 1:
        nodes -= rm["resources"]["num_nodes"]
    gpus = nodes * cluster["gpus_per_node"]
    if rm["enabled"] and cluster["num_nodes"] == 1:
        gpus -= rm["resources"]["gpus_per_node"]
    mcfg = cfg["policy"]["megatron_cfg"]
    model_parallel = mcfg["tensor_model_parallel_size"] * mcfg["pipeline_model_parallel_size"]
    return gpus, model_parallel, gpus // model_parallel


def static_gb_per_gpu(cfg, params: float) -> float:
    """bf16 weights + bf16 grads per model-parallel rank + fp32 master and Adam m, v
    (12 B/param) sharded over every policy GPU (distributed optimizer), in GB."""
    gpus, model_parallel, _ = layout(cfg)
    return (params * 4 / model_parallel + params * 12 / gpus) / 1e9


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=lambda p: p.name)
def test_parallel_layout_divides_the_cluster(path):
    cfg = load_config(path)
    gpus, model_parallel, dp = layout(cfg)
    assert gpus % model_parallel == 0 and dp >= 1
    assert gpus % cfg["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == 0
    samples = cfg["grpo"]["num_prompts_per_step"] * cfg["grpo"]["num_generations_per_prompt"]
    assert samples % cfg["policy"]["train_global_batch_size"] == 0
    assert cfg["policy"]["train_global_batch_size"] % dp == 0


def test_llama70b_memory_arithmetic_fits_80_and_141_gb():
    params = 70.6e9  # Llama-3.3-70B
    path = CONF / "wildchat_llama70b_darling.yaml"
    default = load_config(path)
    assert layout(default) == (32, 16, 2)  # TP4 x PP4 x DP2 on 4 policy nodes
    # even split: 141.2 GB / 16 = 8.8 (weights) + 8.8 (grads) + 847 / 32 = 26.5 (optimizer)
    # = 44.1 GB of 80 before activations (the first stage, with the embedding, holds a little
    # more: 8.5 + 8.5 + 25.4 GiB in the YAML header, from darling_nemo.plan)
    assert static_gb_per_gpu(default, params) == pytest.approx(44.1, abs=0.2)
    h200 = load_config(
        path, ["cluster.num_nodes=3", "policy.megatron_cfg.pipeline_model_parallel_size=2"]
    )
    assert layout(h200) == (16, 8, 2)  # TP4 x PP2 x DP2 on 2 policy nodes
    # 17.6 + 17.6 + 53 = 88 GB: fits 141 GB, not 80 GB
    assert static_gb_per_gpu(h200, params) == pytest.approx(88.3, abs=0.3)
    assert 80 < static_gb_per_gpu(h200, params) < 141 - 10


# Every other YAML under conf/, with the schema its recipe validates it against and the keys
# its header says to give on the command line (they are null in the file: required).
def _other_schemas() -> dict[str, tuple[object, list[str]]]:
    from darling_nemo.evals.schema import CreativeEvalConfig, MathEvalConfig, NoveltyBenchConfig
    from darling_nemo.schema import ClassifierTrainConfig, MiniConfig, TrlRunConfig

    model_run = ["generator.model=/ckpt", "output_dir=/tmp/out"]
    creative_run = [*model_run, "prompts=/tmp/p.jsonl", "judge.model=judge"]
    return {
        "local/math_trl.yaml": (TrlRunConfig, []),
        "local/wildchat_trl.yaml": (TrlRunConfig, []),
        "mini/default.yaml": (MiniConfig, []),
        "mini/dice_k.yaml": (MiniConfig, []),
        "mini/routes_gates.yaml": (MiniConfig, []),
        "mini/routes.yaml": (MiniConfig, []),
        "mini/routes_no_habit.yaml": (MiniConfig, []),
        "mini/rivals.yaml": (MiniConfig, []),
        "mini/hard.yaml": (MiniConfig, []),
        "mini/dice.yaml": (MiniConfig, []),
        "mini/high_lr.yaml": (MiniConfig, []),
        "mini/judge_sweep.yaml": (MiniConfig, []),
        "mini/judge_rates.yaml": (MiniConfig, []),
        "mini/routes_judge_rates.yaml": (MiniConfig, []),
        "mini/all_methods.yaml": (MiniConfig, []),
        "classifier/minilm_noveltybench.yaml": (ClassifierTrainConfig, []),
        "classifier/minilm_biencoder_noveltybench.yaml": (ClassifierTrainConfig, []),
        "classifier/serve_8gpu.yaml": ("servers", ["model=/ckpt"]),
        "eval/math.yaml": (MathEvalConfig, model_run),
        "eval/math_tiny.yaml": (MathEvalConfig, model_run),
        "eval/noveltybench.yaml": (NoveltyBenchConfig, model_run),
        "eval/noveltybench_tiny.yaml": (NoveltyBenchConfig, [*model_run, "reward_model.model=/rm"]),
        "eval/creative.yaml": (CreativeEvalConfig, creative_run),
        "eval/creative_tiny.yaml": (CreativeEvalConfig, creative_run),
    }


def test_every_yaml_in_conf_is_validated_by_its_recipes_schema():
    from darling_nemo.serve_classifiers import load_servers_config

    others = _other_schemas()
    claimed = {p.relative_to(CONF).as_posix() for p in RECIPE_CONFIGS + BASE_CONFIGS}
    every = {p.relative_to(CONF).as_posix() for p in CONF.rglob("*.yaml")}
    # A new YAML must be added here (or be a recipe/base config) so that it is checked too.
    assert every - claimed == set(others), sorted(every - claimed ^ set(others))
    for name, (schema, overrides) in others.items():
        if schema == "servers":
            load_servers_config(str(CONF / name), overrides)
            continue
        defaults = schema().model_dump(mode="json") if schema.__name__.startswith("Class") else {}
        raw = {**defaults, **load_config(CONF / name, overrides)}
        try:
            schema.model_validate(raw)
        except Exception as err:  # name the file in the failure
            raise AssertionError(f"conf/{name}: {err}") from err
