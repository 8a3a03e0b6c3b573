"""Plain helpers several test modules share (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# The marks of a test module that loads Hugging Face models: from local folders only (the
# `offline` fixture), and quiet about the deprecations older transformers model code raises.
HF_MODEL_MARKS = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("offline"),
]
# One torch thread: on a small shared CI machine, thread oversubscription makes a tiny
# model's generate() hundreds of times slower.
RECIPE_ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
}


def run_python(
    *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python *args` in a fresh interpreter (this one's executable) from the repository root,
    stdout and stderr captured as text; `env` replaces the environment when given."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# A hang guard for a whole recipe run in a test, not a speed check: a recipe that takes 90 s
# on a quiet machine took over 600 s at load 6-9 on 2 cores, so the guard is CI's own limit
# for one test (.ci/run's --timeout for the NeMo-RL part); speed lives in benchmarks.
HANG_GUARD_S = 1800


def run_recipe(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`recipes/<script>` as a user runs it: a fresh interpreter, from the repository root,
    offline. With `check`, a non-zero exit fails the test with the end of its stderr."""
    proc = run_python(str(REPO / "recipes" / script), *args, env=RECIPE_ENV, timeout=HANG_GUARD_S)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def nemo_config(darling: dict | None = None, **grpo) -> dict:
    """The NeMo-RL keys that nemo_rl.checks reads, consistent with DARLING's defaults;
    `grpo` keys and `darling` settings override them."""
    return {
        "grpo": {
            "normalize_rewards": False,
            "use_leave_one_out_baseline": False,
            "num_generations_per_prompt": 8,
            "async_grpo": {"enabled": False},
            "reward_shaping": {"enabled": False},
            **grpo,
        },
        "loss_fn": {"token_level_loss": True},
        "darling": {"judge": {"kind": "lexical"}, **(darling or {})},
    }


def scale_rewards_and_baseline(cfg: dict, batch, input_ids) -> tuple:
    """grpo_train v0.4.0's first lines after the rollout: scale_rewards (where the DARLING
    hook sits), then NeMo-RL's group baseline and std; returns (batch, baseline, std)."""
    import torch
    from nemo_rl.algorithms import grpo
    from nemo_rl.algorithms.utils import calculate_baseline_and_std_per_prompt

    batch = grpo.scale_rewards(batch, cfg["grpo"]["reward_scaling"])
    rewards = batch["total_reward"]
    baseline, std = calculate_baseline_and_std_per_prompt(
        input_ids,
        rewards,
        torch.ones_like(rewards),
        leave_one_out_baseline=cfg["grpo"]["use_leave_one_out_baseline"],
    )
    return batch, baseline, std


def start_local_ray(**init_kwargs: Any) -> None:
    """`ray.init(**init_kwargs)` for a test's own local cluster, tried up to three times.

    Ray waits a fixed 30 s for its raylet to register (ray/_private/node.py); on a 2-core
    machine at a load average of 20 (measured: three suites at once beside two busy loops)
    that wait ran out in 3 setups of one fresh-clone run. Only that start-up timeout is
    retried; any other error is the test's to report."""
    import ray

    for attempt in range(3):
        try:
            ray.init(**init_kwargs)
            return
        except Exception as err:  # ray raises a bare Exception for this one
            if "timed out during startup" not in str(err) or attempt == 2:
                raise
            ray.shutdown()


def saved_decoder_config(folder: Path, config_class: Any, **sizes: Any) -> Any:
    """A decoder's transformers config, with grouped-query attention (4 heads, 2 of keys and
    values) and untied embeddings as the real policies have, saved to `folder` (config.json)
    for darling-plan to read; `sizes` gives the rest (hidden size, layers, vocabulary...)."""
    config = config_class(
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, **sizes
    )
    config.save_pretrained(folder)
    return config


def metrics_of_both_engines(
    darling: Any,
    make_judge: Any,
    texts: list[str],
    quality: list[float],
    logprobs: list[float] | None = None,
) -> dict[str, float]:
    """The darling/* metrics of two groups of four (prompts p and q), as the TRL reward logs
    them and as the NeMo-RL transform pops them for the same batch, each engine with its own
    `make_judge()`. Asserts that both log the same names with the same values (timings
    apart) and returns the TRL engine's. `logprobs` (one per response) reach each engine the
    way it gets them: TRL's reward keyword `darling_logprobs`, NeMo-RL's per-token
    `generation_logprobs` (here one token per response)."""
    import pytest
    import torch

    from darling_nemo.nemo_rl.transform import DarlingRewardTransform
    from darling_nemo.trl.reward import DarlingReward

    logged: dict[str, float] = {}
    extra = {} if logprobs is None else {"darling_logprobs": list(logprobs)}
    DarlingReward(lambda prompts, completions, **_: list(quality), darling, 4, judge=make_judge())(
        ["p"] * 4 + ["q"] * 4, texts, log_metric=logged.__setitem__, **extra
    )
    token_logprobs = [[0.0]] * len(texts) if logprobs is None else [[lp] for lp in logprobs]
    transform = DarlingRewardTransform(darling, make_judge())
    prompt_ids = [torch.tensor([1])] * 4 + [torch.tensor([2])] * 4  # NeMo-RL groups by these
    transform.apply(
        {  # the two keys of NeMo-RL's rollout batch that the transform reads
            "message_log": [
                [
                    {"role": "user", "content": "", "token_ids": ids},
                    {
                        "role": "assistant",
                        "content": text,
                        "token_ids": torch.tensor([0]),
                        "generation_logprobs": torch.tensor(lps),
                    },
                ]
                for ids, text, lps in zip(prompt_ids, texts, token_logprobs, strict=True)
            ],
            "total_reward": torch.tensor(quality, dtype=torch.float32),
        }
    )
    nemo = {f"darling/{k}": v for k, v in transform.pop_metrics().items()}
    assert set(logged) == set(nemo)
    timings = {"darling/seconds", "darling/judge_seconds"}
    assert {k: v for k, v in logged.items() if k not in timings} == pytest.approx(
        {k: v for k, v in nemo.items() if k not in timings}
    )
    return logged


def one_trl_step(
    tmp_path: Path,
    sections: dict[str, Any],
    rows: list[dict[str, str]],
    quality: Any,
    *,
    max_completion_length: int,
    word_vocabulary: list[str] | None = None,
    judge: Any = None,
) -> tuple[Any, Any, list[str]]:
    """One real GRPOTrainer step of the TRL engine (2 prompts, groups of 4) on `rows`, with
    `sections` (task, darling) completing its config. Asserts that the advantages TRL logs
    are the DARLING reward's, row for row; returns the trainer, the reward and the messages
    of the FutureWarnings the step raised. The judge and the trainer class are chosen as
    `trl.run` chooses them for the config's method (`judge_for_method`, `trainer_class_for`)."""
    import warnings

    import numpy as np
    from datasets import Dataset
    from trl import GRPOTrainer

    from darling_nemo.trl.logprobs import trainer_class_for
    from darling_nemo.trl.policy import build_policy
    from darling_nemo.trl.reward import DarlingReward
    from darling_nemo.trl.run import grpo_args, upstream_deprecations_silenced, validate_trl_config
    from darling_nemo.trl.tasks import TrainingTask, judge_for_method

    trainer_section = {"max_steps": 1, "prompts_per_step": 2, "group_size": 4}
    cfg = validate_trl_config(
        {
            "engine": "trl",
            "output_dir": str(tmp_path),
            "trainer": {**trainer_section, "max_completion_length": max_completion_length},
            "logging": {"report_to": [], "progress_bar": False},
            **sections,
        }
    )
    task = TrainingTask(rows, [], quality, judge=judge, word_vocabulary=word_vocabulary)
    model, tokenizer = build_policy(cfg, task, tmp_path)
    reward = DarlingReward(task.quality, cfg.darling, 4, judge=judge_for_method(cfg, judge))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FutureWarning)
        with upstream_deprecations_silenced():
            trainer = trainer_class_for(cfg.darling, GRPOTrainer)(
                model=model,
                reward_funcs=[reward],
                args=grpo_args(cfg, tmp_path),
                train_dataset=Dataset.from_list(rows),
                processing_class=tokenizer,
            )
            reward.check_trainer_args(trainer.args, trainer.reward_funcs)
            trainer.train()
    seen_by_trl = np.asarray(list(trainer._logs["advantages"]))  # TRL's own advantage log
    np.testing.assert_allclose(seen_by_trl, reward.last_batch.advantage, atol=1e-6)
    return trainer, reward, [str(w.message) for w in caught if w.category is FutureWarning]


def needs_vllm_sources() -> pytest.MarkDecorator:
    """Skips a test unless vLLM 0.10.0's sources sit beside this environment
    (containers/vllm_contract_env.sh; .ci/run installs them), saying why."""
    from darling_nemo.rehearsal.contract_vllm import sources

    found, why = sources()
    return pytest.mark.skipif(found is None, reason=why)


def verdicts_of_every_config(
    check_many: Any, cases: list[tuple[str, list[str], str]]
) -> list[tuple[str, str]]:
    """A contract's `check_many` on every config in conf/ and then on each case (a config of
    conf/, its overrides, the start of its verdict), in one call as the rehearsals share one
    child process. Asserts each case's verdict; returns (file name, verdict) of the configs,
    each printed."""
    from darling_nemo.config import load_config

    configs = sorted((REPO / "conf").glob("*.yaml"))
    cfgs = [load_config(path) for path in configs]
    cfgs += [load_config(REPO / "conf" / name, overrides) for name, overrides, _ in cases]
    verdicts = check_many(cfgs)
    for (_, _, expected), verdict in zip(cases, verdicts[len(configs) :], strict=True):
        print(verdict)
        assert verdict.startswith(expected), verdict
    for path, verdict in zip(configs, verdicts, strict=False):
        print(f"{path.name}: {verdict}")
    return [(path.name, verdict) for path, verdict in zip(configs, verdicts, strict=False)]


# The config the smoke test trains through the rehearsal's world (tests/nemo_rl_engine/
# test_smoke.py): one node, validates, resumes, cheapest; and with it CI's rehearsal path of
# a recipe that starts its own classifier server (test_rehearsal.py's table).
SMOKE_CONFIG = "conf/math_qwen3_1p7b_1node_darling.yaml"


def mount_tmpfs(folder: Path, size: str) -> str | None:
    """Mount a real tmpfs of `size` (e.g. "3m") on `folder`, for a test of a full disk;
    returns why not where mounting is not allowed (not root, a container without the
    capability), None when mounted. Unmount with `unmount(folder)`."""
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    return None if made.returncode == 0 else (made.stderr.strip() or "mount failed")


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], check=False)


def wait_ready(proc: subprocess.Popen, seen: list[str] | None = None, timeout_s: int = 180) -> str:
    """The URL of a classify_server's `READY http://...` line. What it prints goes on into
    `seen` (where a test reads its log) after READY too, so its pipe never fills."""
    seen = [] if seen is None else seen
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if line.startswith("READY "):
            threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True).start()
            return line.split()[1]
    raise RuntimeError(f"server did not start: {''.join(seen)[-2000:]}")


def start_recipe_as_from_a_terminal(
    args: list[str], env: dict[str, str], stdout: Any = subprocess.PIPE
) -> subprocess.Popen:
    """`python ARGS` in the repository with a terminal's SIGINT, for a Ctrl-C test. A shell that
    starts a job in the background (CI's CPU suite) hands it SIGINT ignored, exec keeps an
    ignored signal, and Python keeps it ignored: Ctrl-C would reach nothing."""
    import signal

    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def checkpoint_by_hand(folder: Path, manifest: bool = True) -> Path:
    """A small checkpoint as the Trainer writes one: safetensors weights, a torch zip, JSON
    (one file in a subfolder, as a sentence-transformers model has)."""
    import torch
    from safetensors.torch import save_file

    from darling_nemo.manifest import write_manifest

    folder.mkdir(parents=True)
    save_file({"w": torch.arange(6, dtype=torch.float32)}, folder / "model.safetensors")
    torch.save({"step": 3}, folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text('{"global_step": 3}')
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text("{}")
    if manifest:
        write_manifest(folder)
    return folder
