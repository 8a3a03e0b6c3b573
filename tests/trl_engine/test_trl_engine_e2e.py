"""End to end on CPU: the math/wildchat recipes through TRL, resume after an interruption.

Each run is a few steps of a tiny policy (seconds). The resume test stops a run after 2
steps (max_steps=2), reruns the same output directory with max_steps=4, and checks that it
continued from checkpoint-2, and that the result equals a run that was never interrupted.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
import torch
from helpers import REPO
from safetensors.torch import load_file

from darling_nemo.config import load_config
from darling_nemo.schema import ConfigError
from darling_nemo.trl.run import checkpoint_step, last_checkpoint, run


@pytest.fixture(autouse=True)
def _offline_single_thread(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)  # the configs' data paths are relative to the repository root
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def recipe_main(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_finite(metrics: dict) -> None:
    for key, value in metrics.items():
        if isinstance(value, float):
            assert math.isfinite(value), key


def run_cpu_config(recipe: str, config: str, out: Path) -> dict:
    """`recipes/<recipe>.py --config <config>` in this interpreter: its 4 steps end with exit
    code 0 and finite final metrics, which it returns."""
    code = recipe_main(recipe)(["--config", config, f"output_dir={out}", "+torch_threads=1"])
    assert code == 0
    final = json.loads((out / "final_metrics.json").read_text())
    assert final["global_step"] == 4
    assert_finite(final)
    return final


def assert_the_judge_decided_pairs_every_step(train: list[dict]) -> None:
    """The configured (embedding) judge was asked on every step: the tiny policy writes
    responses longer than the short-answer rule, so not every pair is settled by the rules."""
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    for record in train:
        assert record["darling/judge_calls"] > 0, record
        assert record["darling/pairs_judged"] > 0, record


def test_math_recipe_runs_a_few_steps_through_trl(tmp_path, capfd):
    out = tmp_path / "math"
    final = run_cpu_config("darling_math", "conf/local/math_trl.yaml", out)
    said = capfd.readouterr().out.splitlines()  # which judge the run got, with its figures
    assert any(
        line.startswith("darling judge: embedding judge, calibrated head")
        and "false similar" in line
        for line in said
    ), said
    for key in ("darling/quality_mean", "darling/diversity_mean", "eval/pass@1", "eval/pass@8"):
        assert key in final
    train = read_jsonl(out / "train_log.jsonl")
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert all(0.0 <= r["darling/diversity_mean"] <= 1.0 for r in train)
    assert_the_judge_decided_pairs_every_step(train)
    assert [r["step"] for r in read_jsonl(out / "eval_history.jsonl")] == [0, 2, 4]
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()
    assert list((out / "runs").rglob("events.out.tfevents.*"))  # TensorBoard logs


def test_wildchat_recipe_with_kl_runs_through_trl(tmp_path):
    out = tmp_path / "wildchat"
    run_cpu_config("darling_wildchat", "conf/local/wildchat_trl.yaml", out)
    logged = read_jsonl(out / "train_log.jsonl")
    # The stand-in quality (capped length) varies, so advantages are not all zero.
    assert any(r["darling/advantage_abs_mean"] > 0 for r in logged)
    assert all("kl" in r and math.isfinite(r["kl"]) for r in logged)  # the reference model ran
    assert_the_judge_decided_pairs_every_step(logged)


def chat_config(tmp_path: Path, out: Path, steps: int) -> dict:
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ["Hi.", "Tell a joke.", "Why?"])
    )
    return {
        "engine": "trl",
        "seed": 7,
        "output_dir": str(out),
        "torch_threads": 1,
        "task": {
            "kind": "chat",
            "data_path": str(data),
            "quality": {"kind": "length_stand_in", "target_words": 4},
        },
        "trainer": {
            "max_steps": steps,
            "prompts_per_step": 2,
            "group_size": 4,
            "learning_rate": 1e-3,
            "max_completion_length": 12,
            "save_steps": 2,
        },
        "logging": {"report_to": [], "progress_bar": False},
    }


def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path):
    out = tmp_path / "interrupted"
    first = run(chat_config(tmp_path, out, steps=2))  # the "kill": stops after step 2
    assert first["global_step"] == 2
    assert (out / "checkpoint-2").is_dir()

    resumed = run(chat_config(tmp_path, out, steps=4))
    assert resumed["resumed_from_step"] == 2  # continued, not restarted
    assert resumed["global_step"] == 4
    assert [r["step"] for r in read_jsonl(out / "train_log.jsonl")] == [1, 2, 3, 4]

    straight_out = tmp_path / "straight"
    straight = run(chat_config(tmp_path, straight_out, steps=4))
    assert straight["resumed_from_step"] == 0
    # Same seed: the resumed run is the uninterrupted run (weights and logged metrics).
    resumed_weights = load_file(out / "final" / "model.safetensors")
    straight_weights = load_file(straight_out / "final" / "model.safetensors")
    assert resumed_weights.keys() == straight_weights.keys()
    for name, tensor in straight_weights.items():
        torch.testing.assert_close(resumed_weights[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    for a, b in zip(
        read_jsonl(out / "train_log.jsonl"),
        read_jsonl(straight_out / "train_log.jsonl"),
        strict=True,
    ):
        assert a["darling/quality_mean"] == pytest.approx(b["darling/quality_mean"])

    # A finished run is not retrained: the saved final metrics come back as they are.
    stamp = (out / "final_metrics.json").stat().st_mtime_ns
    assert run(chat_config(tmp_path, out, steps=4))["global_step"] == 4
    assert (out / "final_metrics.json").stat().st_mtime_ns == stamp


def test_a_run_directory_refuses_settings_that_change_results(tmp_path):
    out = tmp_path / "run"
    cfg = chat_config(tmp_path, out, steps=2)
    cfg["trainer"]["lr_scheduler"] = "linear"
    first = run(cfg)
    assert first["global_step"] == 2

    # Another learning rate and another darling: section: refused, naming both key paths
    # (before the fix the saved final metrics came back as if they belonged to this config).
    changed = {
        **cfg,
        "trainer": {**cfg["trainer"], "learning_rate": 5e-4},
        "darling": {"enabled": False},
    }
    with pytest.raises(ConfigError, match="holds a run made with other settings") as err:
        run(changed)
    assert "trainer.learning_rate: 0.001 -> 0.0005" in str(err.value)
    assert "darling.enabled: True -> False" in str(err.value)
    # A linear schedule's learning rate depends on max_steps: more steps would mix schedules.
    with pytest.raises(ConfigError, match=r"trainer\.max_steps: 2 -> 3[\s\S]*lr_scheduler"):
        run({**cfg, "trainer": {**cfg["trainer"], "max_steps": 3}})
    # Logging, threads and checkpoint frequency change nothing trained: the run is reused.
    stamp = (out / "final_metrics.json").stat().st_mtime_ns
    same = {
        **cfg,
        "torch_threads": 2,
        "logging": {"report_to": [], "progress_bar": True, "print_metrics": False},
        "trainer": {**cfg["trainer"], "save_steps": 5},
    }
    assert run(same) == first
    assert (out / "final_metrics.json").stat().st_mtime_ns == stamp


def test_max_steps_may_grow_under_a_constant_rate_but_not_shrink_below_the_trained(tmp_path):
    out = tmp_path / "run"
    run(chat_config(tmp_path, out, steps=2))  # constant learning rate (the default)
    with pytest.raises(ConfigError, match=r"max_steps=1, but .* already holds 2 trained steps"):
        run(chat_config(tmp_path, out, steps=1))
    assert run(chat_config(tmp_path, out, steps=3))["resumed_from_step"] == 2


def test_a_chat_policy_gets_conversational_prompts(tmp_path, monkeypatch):
    """A pretrained policy whose tokenizer has a chat template: the run hands TRL each
    prompt as a user message, and the quality function reads message-list completions."""
    from darling_nemo.tasks import chat
    from darling_nemo.trl.policy import char_tokenizer, tiny_llama

    tokenizer = char_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    torch.manual_seed(0)
    tiny_llama(tokenizer, 32, 1, 2, 64, 64).save_pretrained(tmp_path / "policy")
    tokenizer.save_pretrained(tmp_path / "policy")

    seen = []
    stand_in = chat.length_stand_in_quality

    def recording_stand_in(target_words):  # the real stand-in, recording what it is given
        quality = stand_in(target_words)

        def length_stand_in(prompts, completions, **kwargs):
            seen.append((prompts, completions))
            return quality(prompts, completions, **kwargs)

        return length_stand_in

    monkeypatch.setattr(chat, "length_stand_in_quality", recording_stand_in)
    cfg = chat_config(tmp_path, tmp_path / "run", steps=1)
    cfg["policy"] = {"kind": "pretrained", "name_or_path": str(tmp_path / "policy")}
    final = run(cfg)
    assert final["global_step"] == 1
    assert_finite(final)
    prompts, completions = seen[0]
    assert prompts[0] in ([{"role": "user", "content": p}] for p in ["Hi.", "Tell a joke.", "Why?"])
    assert all(c[0]["role"] == "assistant" for c in completions)


def test_bad_configs_fail_before_training_with_the_key_path(tmp_path):
    cfg = chat_config(tmp_path, tmp_path / "bad", steps=1)
    with pytest.raises(
        ConfigError,
        match=r"trainer\.lerning_rate: unknown key; did you mean 'trainer\.learning_rate'",
    ):
        run({**cfg, "trainer": {**cfg["trainer"], "lerning_rate": 1.0}})
    with pytest.raises(ConfigError, match=r"logging\.report_to"):
        run({**cfg, "logging": {"report_to": ["mlflow"]}})
    with pytest.raises(ConfigError, match=r"task\.quality\.target_words: must be >= 1"):
        run(
            {
                **cfg,
                "task": {**cfg["task"], "quality": {"kind": "length_stand_in", "target_words": 0}},
            }
        )
    with pytest.raises(ConfigError, match=r"evaluation: .*pass_at_k \[16\]"):
        run({**cfg, "evaluation": {"num_samples": 8, "pass_at_k": [1, 16]}})
    with pytest.raises(ConfigError, match=r"darling\.judge: the digit_sum task"):
        run({**cfg, "task": {"kind": "digit_sum"}, "darling": {"judge": {"kind": "embedding"}}})
    math_cfg = load_config(REPO / "conf" / "local" / "math_trl.yaml", ["task.answer_key=solution"])
    with pytest.raises(
        ValueError, match=r"aime25_first8\.jsonl:1: no 'solution' \(set task.answer_key"
    ):
        run({**math_cfg, "output_dir": str(tmp_path / "m")})


def tiny_reward_model(path: Path) -> Path:
    """A randomly initialised 1-label Llama classifier over the character tokenizer (no chat
    template): the tiny policy's shape with a score head."""
    from transformers import LlamaForSequenceClassification

    from darling_nemo.trl.policy import char_tokenizer, tiny_llama

    tokenizer = char_tokenizer()
    config = tiny_llama(tokenizer, 32, 1, 2, 64, 2048).config  # width 32, 1 layer, 2 heads
    config.num_labels = 1
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_reward_model_quality_scores_prompt_plus_response(tmp_path):
    from darling_nemo.schema import RewardModelQualityConfig
    from darling_nemo.tasks.chat import RewardModelQuality

    path = tiny_reward_model(tmp_path / "rm")
    quality = RewardModelQuality(
        RewardModelQualityConfig(kind="reward_model", name_or_path=str(path), batch_size=2)
    )
    prompts, responses = ["Hi.", "Hi.", "Why?"], [" Hello there.", " Yo", " Because."]
    scores = quality(prompts=prompts, completions=responses)
    # No chat template: the text is prompt + response, scored one at a time the same way.
    alone = [
        quality(prompts=[p], completions=[r])[0] for p, r in zip(prompts, responses, strict=True)
    ]
    assert len(scores) == 3 and all(math.isfinite(s) for s in scores)
    assert scores == pytest.approx(alone, abs=1e-5)  # padding in a batch changes nothing
    assert len(set(scores)) == 3


def test_wildchat_config_with_a_reward_model_runs(tmp_path):
    path = tiny_reward_model(tmp_path / "rm")
    cfg = load_config(
        REPO / "conf" / "local" / "wildchat_trl.yaml",
        [
            f"output_dir={tmp_path / 'run'}",
            f"task.quality={{kind: reward_model, name_or_path: {path}}}",
            "+darling.quality_shift=group_min",
            "trainer.max_steps=2",
            "logging.report_to=[]",
            "+torch_threads=1",
        ],
    )
    final = run(cfg)
    assert final["global_step"] == 2
    assert_finite(final)
    # group_min shift: every group's lowest quality becomes 0, so the rewards are >= 0.
    assert final["darling/reward_mean"] >= 0


# ------------------------------------------------------------------------------ wandb (offline)


def wandb_records(path: Path) -> list:
    """The records of an offline wandb run file (run-*.wandb), as wandb_internal_pb2.Record.

    The file is a 7-byte wandb header and then a LevelDB log: 32 KiB blocks of chunks, each
    with a 7-byte header (crc32c, little-endian length, type: 1 full, 2 first, 3 middle,
    4 last); a block's tail shorter than a header is zero padding. (wandb 0.2x+ reads these
    files in its Go core only; this is the format its Python DataStore used to read.)
    """
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    pos, chunks, records = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            records.append(wandb_internal_pb2.Record.FromString(chunks))
            chunks = b""
    return records


def wandb_history(run_dir: Path) -> list[dict]:
    """The history rows of the one offline wandb run under `run_dir`, once wandb's service
    has written the run's exit record (it writes the file asynchronously, also after
    wandb.finish() returns)."""
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 600  # a hang guard: ms when idle
    while True:
        try:
            records = wandb_records(path)
        except Exception:  # read while the service appends a record: read again
            records = []
        kinds = [r.WhichOneof("record_type") for r in records]
        if "exit" in kinds or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "exit" in kinds, f"{path}: no exit record after 600 s ({kinds})"
    return [
        # a key is in `key`, or split in `nested_key`
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
        for r, kind in zip(records, kinds, strict=True)
        if kind == "history"
    ]


def test_wandb_offline_run_receives_the_darling_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "wandb_run"
    cfg = chat_config(tmp_path, out, steps=1)
    cfg["logging"] = {"report_to": ["wandb"], "progress_bar": False, "print_metrics": False}
    assert run(cfg)["global_step"] == 1
    # WANDB_DIR pointed at the run directory for the run only, then restored.
    assert "WANDB_DIR" not in os.environ and "WANDB_PROJECT" not in os.environ
    (logged,) = read_jsonl(out / "train_log.jsonl")
    darling = {k: v for k, v in logged.items() if k.startswith("darling/")}
    assert {"darling/quality_mean", "darling/collapsed_group_share", "darling/judge_calls"} <= set(
        darling
    )
    # TRL's WandbCallback prefixes training logs with "train/".
    (step,) = [r for r in wandb_history(out) if "train/darling/quality_mean" in r]
    assert {k: step[f"train/{k}"] for k in darling} == pytest.approx(darling)


def test_wandb_without_wandb_installed_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    out = tmp_path / "no_wandb"
    cfg = chat_config(tmp_path, out, steps=1)
    cfg["logging"] = {"report_to": ["tensorboard", "wandb"]}
    with pytest.raises(
        ConfigError, match=r"logging\.report_to includes wandb.*uv sync --extra trl"
    ):
        run(cfg)
    assert not out.exists()


# ------------------------------------------------------------------- a run killed mid-training


def eval_steps_written(path: Path) -> list[int]:
    """Steps of the complete records of an eval history another process is appending to."""
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:  # a line being written right now
            break
    return steps


TIMINGS = ("step_time", "darling/seconds", "darling/judge_seconds")


def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path):
    """SIGKILL a real recipe process after checkpoint-2, once the held-out evaluation has
    run past the checkpoint; the rerun drops those evaluations (truncate_history), resumes
    from the newest complete checkpoint (last_checkpoint) and ends exactly where a run that
    was never interrupted ends: train log, eval history and final weights."""
    args = [
        "--config",
        "conf/local/math_trl.yaml",
        "trainer.max_steps=4",
        "evaluation.every_steps=1",
        "evaluation.num_samples=4",
        "evaluation.pass_at_k=[1,4]",
        "+logging.progress_bar=false",
        "+logging.print_metrics=false",
        "+torch_threads=1",
    ]

    def start(out: Path, log: IO[str]) -> subprocess.Popen:
        """The recipe as a user starts it: a fresh process, writing to `out`, its output in
        `log`."""
        command = [sys.executable, "recipes/darling_math.py", *args, f"output_dir={out}"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)

    killed = tmp_path / "killed"
    history = killed / "eval_history.jsonl"
    with (tmp_path / "killed.log").open("w") as log:
        process = start(killed, log)
        # Only a guard against a hung recipe: the run ends by itself after step 4, and 240 s
        # ran out before step 3 at a load average of 20 on 2 cores.
        deadline = time.monotonic() + 1800
        checkpoint, steps = None, []
        try:
            # The window: step 3's evaluation is written, checkpoint-4 is not yet complete
            # (step 4's training, seconds even on an idle machine, against a 10 ms poll).
            while process.poll() is None and time.monotonic() < deadline:
                checkpoint, steps = last_checkpoint(killed), eval_steps_written(history)
                if checkpoint and steps and steps[-1] > checkpoint_step(checkpoint):
                    process.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.01)
        finally:
            if process.poll() is None and process.returncode is None:
                process.send_signal(signal.SIGKILL)
            code = process.wait()
    assert code == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert checkpoint is not None, "the run never wrote a checkpoint"
    killed_at = checkpoint_step(checkpoint)
    assert killed_at == 2 and steps[-1] > killed_at  # history ran past the checkpoint
    assert not (killed / "final_metrics.json").exists()

    # The rerun and the uninterrupted run are fresh processes, as the killed run was: a user
    # reruns the command. (In this test's own process, state other tests left behind could
    # make steps 1-2 differ from the killed process's in the last bits.)
    straight = tmp_path / "straight"
    for out, name in ((killed, "resumed.log"), (straight, "straight.log")):
        with (tmp_path / name).open("w") as log:
            rerun = start(out, log)
            try:
                code = rerun.wait(timeout=1800)  # a hang guard only
            finally:
                rerun.kill()  # nothing to do once it has ended
        assert code == 0, (tmp_path / name).read_text()[-3000:]

    resumed = json.loads((killed / "final_metrics.json").read_text())
    assert (resumed["resumed_from_step"], resumed["global_step"]) == (killed_at, 4)
    for name in ("eval_history.jsonl", "train_log.jsonl"):
        ours, theirs = read_jsonl(killed / name), read_jsonl(straight / name)
        # Each step once (without truncate_history the evaluations past the checkpoint
        # would appear twice), every value as in the uninterrupted run.
        assert [r["step"] for r in ours] == [r["step"] for r in theirs]
        assert [r["step"] for r in ours] == ([0, 1, 2, 3, 4] if "eval" in name else [1, 2, 3, 4])
        for a, b in zip(ours, theirs, strict=True):
            a, b = ({k: v for k, v in r.items() if k not in TIMINGS} for r in (a, b))
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6), a["step"]
    weights = load_file(killed / "final" / "model.safetensors")
    for name, tensor in load_file(straight / "final" / "model.safetensors").items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-6)
