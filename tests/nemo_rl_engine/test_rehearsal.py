"""The CPU rehearsal of the NeMo-RL path (darling_nemo/rehearsal).

Pure parts (the shrink) run everywhere. The rehearsals themselves are marked `nemo_rl`: they
need NeMo-RL v0.4.0 importable (containers/nemo_rl_cpu_env.sh builds that environment;
.ci/run runs them) and take one to a few minutes each on 2 cores.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

import pytest
from helpers import REPO, SMOKE_CONFIG, run_python

from darling_nemo.config import load_config
from darling_nemo.nemo_rl.adapter import OVERLAP_ON
from darling_nemo.rehearsal.contract_classifier import job as classifier_job
from darling_nemo.rehearsal.contract_megatron_worker import sources as megatron_sources
from darling_nemo.rehearsal.contract_vllm import sources as vllm_sources
from darling_nemo.rehearsal.phases import newest_run_scalars
from darling_nemo.rehearsal.secrets_check import plant_secrets
from darling_nemo.rehearsal.shrink import parallel_layout, shrink_overrides, shrunk_cluster

NEMO_RL_CONFIGS = sorted(
    p.relative_to(REPO).as_posix()
    for p in (REPO / "conf").glob("*.yaml")
    if load_config(p)["engine"] == "nemo_rl"
)


# CI trains, checkpoints and resumes one config per code path of the NeMo-RL run (a path: what
# the recipe, NeMo-RL's loop and the DARLING hook do differently), and takes every other config
# through the config phase, the four contracts and prepare (the shrink, the tiny models). The
# layouts (TP, PP, CP, vLLM TP, sizes) are what the contracts check, for every config.
PATHS = {  # path: (its config, runs: 2 = setup, step, checkpoint, then resume and step)
    "megatron math": ("conf/math_qwen3_4b_darling.yaml", 2),  # + async engine, prefix judging
    # the other paths resume as the DARLING path does (the stand-ins' checkpoint, NeMo-RL's
    # dataloader state, the hook's step counter); only the reward differs, so run 1 each
    "megatron wildchat (reward model)": ("conf/wildchat_llama8b_darling.yaml", 1),
    "grpo baseline": ("conf/math_qwen3_4b_grpo.yaml", 1),
    "rival": ("conf/math_qwen3_4b_outcome.yaml", 1),  # lexical judge + math-verify answers
    # a user's reward functions (examples/code_tests/rewards.py) in the generic environment
    "user reward functions": ("conf/code_tests_qwen3_1p7b_darling.yaml", 1),
}
# Trained elsewhere: the one-node config's recipe starts its own classifier server; the
# smoke (test_smoke.py::test_smoke_passes_with_the_standins) runs that config through the
# rehearsal's world: contracts, prepare, 2 steps, checkpoint, resume, a third step.
SMOKE_PATH = ("one-node classifier server", SMOKE_CONFIG)
PATH_OF_CONFIG = {
    "conf/math_qwen3_14b_darling.yaml": "megatron math",
    "conf/math_qwen3_14b_grpo.yaml": "grpo baseline",
    "conf/math_qwen3_1p7b_1node_darling.yaml": "one-node classifier server",
    "conf/math_qwen3_4b_darling.yaml": "megatron math",
    "conf/math_qwen3_4b_gdpo.yaml": "rival",
    "conf/math_qwen3_4b_grpo.yaml": "grpo baseline",
    "conf/math_qwen3_4b_outcome.yaml": "rival",
    "conf/math_qwen3_4b_passk.yaml": "rival",
    "conf/wildchat_llama70b_darling.yaml": "megatron wildchat (reward model)",
    "conf/wildchat_llama70b_grpo.yaml": "grpo baseline",
    "conf/wildchat_llama8b_darling.yaml": "megatron wildchat (reward model)",
    "conf/wildchat_llama8b_grpo.yaml": "grpo baseline",
    "conf/wildchat_qwen3_1p7b_1node_darling.yaml": "one-node classifier server",
    "conf/code_tests_qwen3_1p7b_darling.yaml": "user reward functions",
}
REPRESENTATIVES = {config for config, _ in PATHS.values()} | {SMOKE_CONFIG}


def code_path(cfg: dict) -> str:
    """The path a config's run takes, read from its keys (what PATH_OF_CONFIG must say)."""
    darling = cfg["darling"]
    if cfg["task"] is not None:
        return "user reward functions"
    if darling["judge"].get("launch"):
        return "one-node classifier server"
    if not darling["enabled"]:
        return "grpo baseline"
    if darling["method"] != "darling" or darling["fusion"] != "multiplicative":
        return "rival"
    if cfg["env"]["reward_model"]["enabled"]:
        return "megatron wildchat (reward model)"
    return "megatron math"


def recipe_for(config: str) -> str:
    cfg = load_config(REPO / config)
    if cfg["task"] is not None:
        return "recipes/darling_task.py"
    wildchat = cfg["env"]["reward_model"]["enabled"]
    return "recipes/darling_wildchat.py" if wildchat else "recipes/darling_math.py"


def task_for(config: str) -> str:
    """The recipe's task name (recipes/darling_*.py's Task.name) the rehearsal is given."""
    recipe = recipe_for(config)
    return {
        "recipes/darling_task.py": "reward_funcs",
        "recipes/darling_wildchat.py": "wildchat",
    }.get(recipe, "math")


def shrunk(config: str) -> dict:
    cfg = load_config(REPO / config)
    changes = shrink_overrides(
        cfg,
        policy_dir="/tiny/policy",
        reward_model_dir="/tiny/rm" if cfg["env"]["reward_model"]["enabled"] else None,
        train_data="/r/train.jsonl",
        val_data="/r/val.jsonl",
        workdir="/r",
        judge_url="http://127.0.0.1:1",
        classifier_dir="/tiny/clf",
    )
    return load_config(REPO / config, [f"{k}={v!r}".replace("'", '"') for k, v in changes])


# ---------------------------------------------------------------------------------------------
# The shrink: what changes, and that NeMo-RL's divisibility rules still hold
# ---------------------------------------------------------------------------------------------


def test_every_nemo_rl_config_is_rehearsed():
    # the 8 paper configs, the 2 one-node defaults of the no-argument recipes, the 3
    # rivals of math_qwen3_4b_darling (docs/rivals.md) and the user-task example
    assert len(NEMO_RL_CONFIGS) == 14
    # each is in the table, on the path its keys take, and that path's config is trained in CI
    assert sorted(PATH_OF_CONFIG) == NEMO_RL_CONFIGS
    for config, path in PATH_OF_CONFIG.items():
        assert code_path(load_config(REPO / config)) == path, config
    for path, config in [(path, config) for path, (config, _) in PATHS.items()] + [SMOKE_PATH]:
        assert PATH_OF_CONFIG[config] == path
    assert set(PATHS) | {SMOKE_PATH[0]} == set(PATH_OF_CONFIG.values())


def test_the_path_table_is_checked_against_the_keys():
    # a config moved onto another path by its keys no longer matches its row
    cfg = load_config(REPO / "conf/wildchat_llama8b_darling.yaml")
    assert code_path(cfg) == "megatron wildchat (reward model)"
    cfg["darling"]["fusion"] = "gdpo"
    assert code_path(cfg) == "rival" != PATH_OF_CONFIG["conf/wildchat_llama8b_darling.yaml"]
    cfg["darling"]["judge"]["launch"] = {"executable": "vllm"}
    assert code_path(cfg) == "one-node classifier server"


@pytest.mark.parametrize("config", NEMO_RL_CONFIGS)
def test_shrunk_layout_keeps_the_configs_parallelism(config):
    before, after = load_config(REPO / config), shrunk(config)
    layout = parallel_layout(before)
    kept = parallel_layout(after)
    # TP, CP and vLLM's TP x PP are kept; PP too, unless the group exceeds 8 fake GPUs, when
    # it is halved but stays > 1
    assert {k: kept[k] for k in ("tp", "cp", "vllm")} == {
        k: layout[k] for k in ("tp", "cp", "vllm")
    }
    assert kept["pp"] == layout["pp"] or (1 < kept["pp"] < layout["pp"])
    assert kept["tp"] * kept["pp"] * kept["cp"] <= 8 or kept["pp"] == 2
    layout = kept
    cluster = shrunk_cluster(before)
    model_parallel = layout["tp"] * layout["pp"] * layout["cp"]
    world = cluster["policy_world"]
    assert world % model_parallel == 0 and world % layout["vllm"] == 0
    assert cluster["dp"] == world // model_parallel
    assert cluster["dp"] == (2 if model_parallel <= 4 else 1)  # gradients cross ranks when cheap
    assert after["cluster"]["gpus_per_node"] % layout["vllm"] == 0  # vLLM stays within a node
    nodes = after["cluster"]["num_nodes"] - cluster["rm_nodes"]
    assert nodes * after["cluster"]["gpus_per_node"] == world
    # whole global batches, split evenly over DP x micro-batches, as NeMo-RL's workers need
    rollout = after["grpo"]["num_prompts_per_step"] * after["grpo"]["num_generations_per_prompt"]
    gbs, mbs = after["policy"]["train_global_batch_size"], after["policy"]["train_micro_batch_size"]
    assert rollout % gbs == 0 and gbs % (cluster["dp"] * mbs) == 0
    # as many optimizer updates per rollout batch as the config (4 for math, 1 for WildChat)
    full = before["grpo"]["num_prompts_per_step"] * before["grpo"]["num_generations_per_prompt"]
    assert rollout // gbs == max(1, full // before["policy"]["train_global_batch_size"])


def test_shrink_of_the_70b_layout_by_hand():
    # TP4 x PP4 = 16 > 8 fake GPUs -> PP 2: TP4 x PP2 = 8 -> DP 1; vLLM TP 8; lcm(8, 8) = 8
    # policy GPUs on one node of the config's 8 GPUs + 1 reward-model node = 2.
    cfg = load_config(REPO / "conf/wildchat_llama70b_darling.yaml")
    assert (
        shrunk(cfg_path := "conf/wildchat_llama70b_darling.yaml")["policy"]["megatron_cfg"][
            "pipeline_model_parallel_size"
        ]
        == 2
    ), cfg_path
    cluster = shrunk_cluster(cfg)
    assert cluster == {
        "policy_world": 8,
        "gpus_per_node": 8,
        "policy_nodes": 1,
        "rm_nodes": 1,
        "rm_gpus": 1,
        "dp": 1,
    }
    assert math.lcm(4 * 2, 8) == 8


def test_shrink_changes_only_sizes_paths_and_services():
    cfg = load_config(REPO / "conf/math_qwen3_4b_darling.yaml")
    after = shrunk("conf/math_qwen3_4b_darling.yaml")
    # the DARLING section, the loss and the optimizer are the user's
    assert after["darling"] | {"judge": None} == cfg["darling"] | {"judge": None}
    assert after["darling"]["judge"]["template"] == "qwen3_math"
    assert after["loss_fn"] == cfg["loss_fn"]
    assert (
        after["policy"]["megatron_cfg"]["optimizer"] == cfg["policy"]["megatron_cfg"]["optimizer"]
    )
    assert after["grpo"]["num_generations_per_prompt"] == 8  # DARLING's group size is kept
    assert after["grpo"]["normalize_rewards"] is False
    assert after["checkpointing"]["model_save_format"] == cfg["checkpointing"]["model_save_format"]
    # interpolations follow the shrunk values through the loader
    assert after["policy"]["generation"]["vllm_cfg"]["max_model_len"] == 112  # 96 + 16
    assert after["policy"]["sequence_packing"]["train_mb_tokens"] == 112 * 2


def test_a_rehearsal_process_imports_the_swap_only_with_a_module_it_patches():
    # Most of a run's ~28 Python processes (Ray's daemons, idle and queue workers) never
    # import a patched module; each paid 1-5 s of CPU for swap.py's imports at start-up.
    site = REPO / "darling_nemo" / "rehearsal" / "site"
    env = {**os.environ, "DARLING_REHEARSAL_DIR": "/r", "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
    code = (
        "import sys; swap = 'darling_nemo.rehearsal.swap'; print(swap in sys.modules); "
        "from darling_nemo.nemo_rl.transform import DarlingRewardTransform as T; "
        "print(swap in sys.modules, T.compute._rehearsal, T.__init__._rehearsal)"
    )
    proc = run_python("-c", code, env=env, timeout=120)
    assert proc.stdout.split() == ["False", "True", "True", "True"], proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# The rehearsals (NeMo-RL v0.4.0 importable)
# ---------------------------------------------------------------------------------------------


def run_rehearsal(
    args: list[str], timeout: int = 1500, env_extra: dict[str, str] | None = None
) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    start = time.monotonic()
    proc = run_python(*args, env=env, timeout=timeout)
    wall = time.monotonic() - start
    out = proc.stdout + proc.stderr
    print(out[-4000:])
    return proc.returncode, out, wall


def verdict(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("rehearsal: ")]
    return lines[-1] if lines else "(no verdict line)"


def in_process(config: str, overrides: list[str], **rehearse_args) -> tuple[int, str, float]:
    """`rehearse()` with arguments the command line does not take (drills, runs=1)."""
    task = task_for(config)
    code = (
        "import sys; from pathlib import Path; "
        "from darling_nemo.rehearsal.run import rehearse; "
        f"sys.exit(rehearse(Path({recipe_for(config)!r}).resolve(), {config!r}, "
        f"{overrides!r}, {task!r}, **{rehearse_args!r}))"
    )
    return run_rehearsal(["-c", code])


def contract_phases() -> tuple[str, ...]:
    """NeMo-RL's own Megatron and vLLM worker paths too, where the pinned libraries are
    installed (.ci/run installs both)."""
    return (
        ("contract (megatron)",)
        + (("contract (megatron worker)",) if megatron_sources()[0] is not None else ())
        + (("contract (vllm)",) if vllm_sources()[0] is not None else ())
    )


def assert_phases_pass(out: str, config: str, phases: tuple[str, ...]) -> None:
    for phase in phases:
        assert any(
            line.startswith(f"phase {phase}") and ": PASS" in line for line in out.splitlines()
        ), phase
    # the classifier servers' command line, where the job starts any
    if vllm_sources()[0] is not None:
        expected = "PASS" if isinstance(classifier_job(load_config(config)), dict) else "SKIPPED"
        assert any(
            line.startswith(f"phase contract (vllm classify): {expected}")
            for line in out.splitlines()
        )


OTHER_CONFIGS = sorted(set(NEMO_RL_CONFIGS) - REPRESENTATIVES)
OTHER_CONFIG_MARK = "OTHER CONFIG "


@pytest.mark.nemo_rl
def test_every_other_config_passes_contracts_and_prepare():
    # the configs whose code path another config trains below: the config phase, the four
    # contracts (cached by the contract tests before this file) and the shrink's tiny models.
    # One child process rehearses them all, one after another: a process per config paid its
    # interpreter start and the imports of the tiny models (torch, transformers) 8 times.
    pytest.importorskip("nemo_rl")
    rehearsals = ", ".join(
        f"({config!r}, Path({recipe_for(config)!r}).resolve(), {task_for(config)!r})"
        for config in OTHER_CONFIGS
    )
    code = (
        "from pathlib import Path; from darling_nemo.rehearsal.run import rehearse\n"
        f"for config, recipe, task in [{rehearsals}]:\n"
        f"    print({OTHER_CONFIG_MARK!r} + config, flush=True)\n"
        f"    print({OTHER_CONFIG_MARK!r} + 'exit', rehearse(recipe, config, [], task, runs=0))"
    )
    rc, out, wall = run_rehearsal(["-c", code], timeout=3000)  # a hang guard only
    assert rc == 0, out[-3000:]
    # each config's own output: from its mark to the next config's
    parts = re.split(rf"^{OTHER_CONFIG_MARK}(\S+)\n", out, flags=re.M)[1:]
    outputs = dict(zip(parts[::2], parts[1::2], strict=True))
    assert sorted(outputs) == OTHER_CONFIGS, sorted(outputs)
    for config, config_out in outputs.items():
        print(f"REHEARSAL {config}: {verdict(config_out)} ({wall:.0f} s for all)")
        assert verdict(config_out).startswith("rehearsal: PASS up to prepare"), (
            config,
            verdict(config_out),
        )
        assert f"{OTHER_CONFIG_MARK}exit 0" in config_out, config
        assert_phases_pass(config_out, config, (*contract_phases(), "prepare"))
        assert "phase ray" not in config_out, config


@pytest.mark.nemo_rl
@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(PATHS))
def test_rehearsal_passes(path):
    # One config per code path (PATHS): trained, checkpointed and, with runs 2, resumed. The
    # other paths differ from the DARLING path in the reward only and share its resume. `--rehearse` by hand runs both runs of any config (docs/rehearsal.md).
    pytest.importorskip("nemo_rl")
    config, runs = PATHS[path]
    # the math path runs with a user's secrets in its environment and the judge's token
    # given (the rehearsal's server checks it, its driver sends it): none may reach Ray's
    # state, the run's files or its logs
    secrets = FAKE_SECRETS if path == "megatron math" else {}
    if runs == 1:
        rc, out, wall = in_process(config, [], runs=1)
    else:
        args = [recipe_for(config), "--config", config, "--rehearse"]
        rc, out, wall = run_rehearsal(args, env_extra=secrets)
    print(f"REHEARSAL {path} ({config}): {verdict(out)} in {wall:.0f} s")
    assert verdict(out).startswith("rehearsal: PASS"), verdict(out)
    assert rc == 0
    # darling.overlap (the default) was on: the judge ran while NeMo-RL computed log-probs
    logs = Path(re.search(r"logs in (\S+?)\)", out).group(1))
    for run in range(1, runs + 1):
        assert OVERLAP_ON in (logs / f"run{run}.log").read_text(), run
    runs_phases = tuple(f"run {run}" for run in range(1, runs + 1))
    assert_phases_pass(out, config, (*contract_phases(), "prepare", "ray", *runs_phases))
    if path == "megatron math":  # the causal classifier's stand-in reused cached prefixes
        reused = re.findall(r"judge prefix cache: (\d+) prompt tokens reused", out)
        assert len(reused) == runs and all(int(n) > 0 for n in reused), reused
        assert_no_secret_anywhere(out, logs)
    if path == "user reward functions":  # the example's functions scored step 1's batch
        scalars = newest_run_scalars(logs / "logs", "user reward functions")
        assert list(scalars["darling/quality_seconds"]) == [1], scalars
        assert scalars["darling/quality_seconds"][1] > 0
        assert scalars["darling/reward_timeouts"][1] == 0


FAKE_SECRETS = {
    "WANDB_API_KEY": "wandb-fake-key-5f0c2e9a7d41",
    "HF_TOKEN": "hf_fakeToken8c1d4b7e2a90",
    "DARLING_JUDGE_TOKEN": "judge-fake-token-3e8b1f6c0d27",
}


def assert_no_secret_anywhere(out: str, folder: Path) -> None:
    """The rehearsal's own secrets phase passed for these names and the ones it plants under
    names no deny-list knows (it read Ray's tables and KV store while its Ray ran), and no
    fake value is in its output or any file it wrote."""
    (line,) = [line for line in out.splitlines() if line.startswith("phase secrets (")]
    planted = [secret.name for secret in plant_secrets()]
    assert line.endswith(": PASS") and all(n in line for n in [*FAKE_SECRETS, *planted]), line
    assert "task events" in line and "internal KV" in line, line
    for value in FAKE_SECRETS.values():
        assert value not in out
    files = [path for path in folder.rglob("*") if path.is_file() and not path.is_symlink()]
    assert len(files) > 20  # logs, checkpoints, Ray's session logs
    for path in files:
        data = path.read_bytes()
        for name, value in FAKE_SECRETS.items():
            assert value.encode() not in data, f"{name}'s value in {path}"


def rehearse_math_4b(*overrides: str) -> tuple[int, str]:
    config = "conf/math_qwen3_4b_darling.yaml"
    rc, out, _ = run_rehearsal(
        ["recipes/darling_math.py", "--config", config, "--rehearse", *overrides]
    )
    return rc, out


@pytest.mark.nemo_rl
def test_rehearsal_fails_on_the_shipped_save_format_naming_the_key():
    # The value every config shipped with before: NeMo-RL v0.4.0's Policy.save_checkpoint
    # raises at the first save. It is refused before anything starts, naming the key.
    pytest.importorskip("nemo_rl")
    rc, out = rehearse_math_4b(
        "checkpointing.model_save_format=safetensors", "policy.dtensor_cfg._v2=false"
    )
    assert rc != 0
    assert verdict(out).startswith("rehearsal: FAIL at config:")
    assert "checkpointing.model_save_format" in verdict(out)


@pytest.mark.nemo_rl
@pytest.mark.parametrize(
    ("override", "named"),
    [
        # 36 layers over 5 stages; validate() lets it through, the model build refuses it
        ("policy.megatron_cfg.pipeline_model_parallel_size=5", "pipeline_model_parallel_size=5"),
        # precision-aware optimizer flags against policy.precision (bfloat16 here)
        ("policy.megatron_cfg.optimizer.bf16=false", "optimizer.bf16=False"),
    ],
)
def test_rehearsal_fails_at_the_megatron_contract_naming_the_key(override, named):
    # refused before the tiny models, Ray or any run: the contract is the first phase. (A
    # misspelt megatron_cfg key is refused earlier still, at config, against the reference
    # config; the contract refuses keys the reference holds but NeMo-RL never reads.)
    pytest.importorskip("nemo_rl")
    rc, out = rehearse_math_4b(override)
    assert rc != 0
    assert verdict(out).startswith("rehearsal: FAIL at contract (megatron):"), verdict(out)
    assert named in verdict(out)
    assert "phase prepare" not in out


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_rehearsal_fails_where_only_nemo_rls_own_code_looks():
    # Nothing in darling-nemo checks vLLM's top_p; NeMo-RL's VllmGeneration refuses < 0.99 in
    # setup(). The rehearsal must report it from the real run, in its phase. (The GRPO
    # baseline's config: the same setup() with no judge server to start first.)
    pytest.importorskip("nemo_rl")
    config = "conf/math_qwen3_4b_grpo.yaml"
    rc, out, _ = run_rehearsal(
        [recipe_for(config), "--config", config, "--rehearse", "policy.generation.top_p=0.5"]
    )
    assert rc != 0
    assert verdict(out).startswith("rehearsal: FAIL at run 1"), verdict(out)
    assert "top_p" in verdict(out)


def drill(fallback: bool) -> tuple[int, str]:
    overrides = ["darling.judge.endpoint_cooldown_s=0.5", "darling.judge.max_attempts=2"]
    if fallback:
        overrides.append("darling.judge.fallback={kind: lexical}")
    rc, out, _ = in_process("conf/math_qwen3_4b_darling.yaml", overrides, judge_dies_after=2)
    return rc, out


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_judge_server_killed_mid_step_with_a_fallback_completes_on_it():
    # The server answers the start-up probe, then dies when step 1's first judge request comes.
    pytest.importorskip("nemo_rl")
    rc, out = drill(fallback=True)
    workdir = Path(re.search(r"^rehearsal of .* in (\S+)$", out, re.M).group(1))
    assert "with the fallback 'lexical' judge" in (workdir / "run1.log").read_text()
    assert verdict(out).startswith("rehearsal: FAIL at run 2"), verdict(out)
    # run 1 finished on the fallback; run 2's start-up probe then finds no server, by name
    assert any(line.startswith("phase run 1") and "PASS" in line for line in out.splitlines())
    assert "127.0.0.1" in verdict(out)
    assert rc != 0


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_judge_server_killed_mid_step_without_fallback_fails_clearly():
    pytest.importorskip("nemo_rl")
    rc, out = drill(fallback=False)
    assert rc != 0
    assert verdict(out).startswith("rehearsal: FAIL at run 1"), verdict(out)
    assert "judge" in verdict(out).lower() and "127.0.0.1" in verdict(out)
