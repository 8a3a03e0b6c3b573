"""End to end on CPU: the math/wildchat recipes through TRL, resume after an interruption.

Each run is a few steps of a tiny policy (seconds). The resume test stops a run after 2
steps (max_steps=2), reruns the same output directory with max_steps=4, and checks that it
continued from checkpoint-2, and that the result equals a run that was never interrupted.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from darling_nemo.config import load_config
from darling_nemo.schema import ConfigError
from darling_nemo.trl_engine import run

REPO = Path(__file__).resolve().parent.parent


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


def test_math_recipe_runs_a_few_steps_through_trl(tmp_path):
    out = tmp_path / "math"
    code = recipe_main("darling_math")(
        ["--config", "conf/local/math_trl.yaml", f"output_dir={out}", "+torch_threads=1"]
    )
    assert code == 0
    final = json.loads((out / "final_metrics.json").read_text())
    assert final["global_step"] == 4
    assert_finite(final)
    for key in ("darling/quality_mean", "darling/diversity_mean", "eval/pass@1", "eval/pass@8"):
        assert key in final
    train = read_jsonl(out / "train_log.jsonl")
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert all(0.0 <= r["darling/diversity_mean"] <= 1.0 for r in train)
    assert [r["step"] for r in read_jsonl(out / "eval_history.jsonl")] == [0, 2, 4]
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()
    assert list((out / "runs").rglob("events.out.tfevents.*"))  # TensorBoard logs


def test_wildchat_recipe_with_kl_runs_through_trl(tmp_path):
    out = tmp_path / "wildchat"
    code = recipe_main("darling_wildchat")(
        ["--config", "conf/local/wildchat_trl.yaml", f"output_dir={out}", "+torch_threads=1"]
    )
    assert code == 0
    final = json.loads((out / "final_metrics.json").read_text())
    assert final["global_step"] == 4
    assert_finite(final)
    logged = read_jsonl(out / "train_log.jsonl")
    # The stand-in quality (capped length) varies, so advantages are not all zero.
    assert any(r["darling/advantage_abs_mean"] > 0 for r in logged)
    assert all("kl" in r and math.isfinite(r["kl"]) for r in logged)  # the reference model ran


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
    from darling_nemo import trl_engine
    from darling_nemo.mini.policy import char_tokenizer, tiny_llama

    tokenizer = char_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    torch.manual_seed(0)
    tiny_llama(tokenizer, 32, 1, 2, 64, 64).save_pretrained(tmp_path / "policy")
    tokenizer.save_pretrained(tmp_path / "policy")

    seen = []
    stand_in = trl_engine.length_stand_in_quality

    def recording_stand_in(target_words):  # the real stand-in, recording what it is given
        quality = stand_in(target_words)

        def length_stand_in(prompts, completions, **kwargs):
            seen.append((prompts, completions))
            return quality(prompts, completions, **kwargs)

        return length_stand_in

    monkeypatch.setattr(trl_engine, "length_stand_in_quality", recording_stand_in)
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
    with pytest.raises(ConfigError, match=r"trainer\.lerning_rate: Extra inputs"):
        run({**cfg, "trainer": {**cfg["trainer"], "lerning_rate": 1.0}})
    with pytest.raises(ConfigError, match=r"logging\.report_to"):
        run({**cfg, "logging": {"report_to": ["mlflow"]}})
    with pytest.raises(ConfigError, match=r"task\.chat\.quality\.length_stand_in\.target_words"):
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
    with pytest.raises(ValueError, match=r"row 1 has no 'solution' \(set task.answer_key"):
        run({**math_cfg, "output_dir": str(tmp_path / "m")})


def tiny_reward_model(path: Path) -> Path:
    """A randomly initialised 1-label Llama classifier over the character tokenizer."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from darling_nemo.mini.policy import char_tokenizer

    tokenizer = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_reward_model_quality_scores_prompt_plus_response(tmp_path):
    from darling_nemo.schema import RewardModelQualityConfig
    from darling_nemo.trl_engine import RewardModelQuality

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
