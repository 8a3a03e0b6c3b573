"""The miniature's parts: the dice task, its judge, tokenizers, warm start, evaluation, report."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.config import load_config
from darling_nemo.manifest import sha256_of
from darling_nemo.mini.plots import (
    band,
    curve_bands,
    figure_title,
    pass_at_k_bands,
    plot_curves,
    plot_pass_at_k,
)
from darling_nemo.mini.report import (
    WALL_TIME,
    WARM_START_ROW,
    WallTime,
    arm_summary,
    differences,
    format_table,
    gains_by_judge_accuracy,
    paired_interval,
    wall_time_note,
)
from darling_nemo.mini.reproducibility import PORTABLE_KERNELS, pin_cpu_kernels
from darling_nemo.mini.task import (
    DigitSum,
    FlippedJudge,
    answer_class,
    multiset_judge,
    prompt_text,
    target_of,
)
from darling_nemo.mini.warm_start import WarmStartData, warm_start
from darling_nemo.schema import ConfigError, DigitSumTaskConfig, MiniConfig, validate_section
from darling_nemo.tasks import task_of
from darling_nemo.tasks.digit_sum import digit_sum_quality, digit_sum_targets
from darling_nemo.trl.evaluate import evaluate, sample_completions
from darling_nemo.trl.policy import char_tokenizer, tiny_llama, word_tokenizer
from darling_nemo.trl.tasks import build_task

DICE = DigitSum(length=6, min_digit=1, max_digit=6)


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    # Tiny models: one thread is fastest, and far faster when other processes share the CPU.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_prompts_write_the_target_in_decimal():
    assert prompt_text(21) == "T2 U1"
    assert prompt_text(7) == "T0 U7"
    assert all(target_of(prompt_text(t)) == t for t in range(100))
    for bad in ["21", "S21", "T2U1", "U1 T2", "T21 U1"]:
        with pytest.raises(ValueError, match="not a digit-sum prompt"):
            target_of(bad)


def test_correct_answers_by_hand():
    assert DICE.is_correct("T2 U1", "6 1 3 4 2 5")  # 6+1+3+4+2+5 = 21
    assert not DICE.is_correct("T2 U1", "6 1 3 4 2 4")  # 20
    assert not DICE.is_correct("T2 U1", "6 1 3 4 7")  # five dice (and a 7)
    assert not DICE.is_correct("T1 U2", "0 2 2 2 3 3")  # 12, but 0 is not a face
    assert not DICE.is_correct("T2 U1", "6 1 3 4 2 5 0")  # seven words
    assert not DICE.is_correct("T2 U1", "613425")  # one word


def test_multisets_by_hand():
    # Six dice totalling 7: only {1,1,1,1,1,2}. Totalling 8: {1,1,1,1,1,3} and {1,1,1,1,2,2}.
    assert DICE.correct_multisets(7) == [(1, 1, 1, 1, 1, 2)]
    assert DICE.correct_multisets(8) == [(1, 1, 1, 1, 1, 3), (1, 1, 1, 1, 2, 2)]
    assert len(DICE.correct_multisets(21)) == 32  # the most of any total
    assert DICE.correct_multisets(37) == []


def test_the_judge_is_the_digit_multiset():
    pairs = [("1 2 3 4 5 6", "6 5 4 3 2 1"), ("1 2 3 4 5 6", "1 2 3 4 5 5"), ("2 2 1", "1 2 2")]
    assert multiset_judge(pairs) == [1.0, 0.0, 1.0]
    assert answer_class("3 1 2") == ("1", "2", "3")


def dice_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """`count` random pairs of six-dice answers, distinct as texts (the judge's pairs)."""
    rng = np.random.default_rng(seed)
    rolls = [" ".join(map(str, rng.integers(1, 7, size=6))) for _ in range(2 * count)]
    return [(a, b) for a, b in zip(rolls[::2], rolls[1::2], strict=True) if a != b]


@settings(max_examples=8, deadline=None)
@given(accuracy=st.floats(0.5, 1.0), seed=st.integers(0, 2**31))
def test_the_flipped_judge_is_wrong_on_the_chosen_fraction_symmetric_and_seeded(accuracy, seed):
    pairs = dice_pairs(4000, seed)
    judge = FlippedJudge(multiset_judge, accuracy, seed)
    verdicts = judge(pairs)
    wrong = np.mean([v != e for v, e in zip(verdicts, multiset_judge(pairs), strict=True)])
    error = 1 - accuracy  # binomial: within 5 standard deviations (plus a rounding hair)
    assert abs(wrong - error) <= 5 * np.sqrt(error * accuracy / len(pairs)) + 1e-9
    assert judge([(b, a) for a, b in pairs]) == verdicts  # (a, b) and (b, a) agree
    assert FlippedJudge(multiset_judge, accuracy, seed)(pairs[::-1]) == verdicts[::-1]  # by content
    assert set(verdicts) <= {0.0, 1.0}


def test_the_flipped_judge_by_hand():
    same, other = ("1 2 3 4 5 6", "6 5 4 3 2 1"), ("1 2 3 4 5 6", "1 2 3 4 5 5")
    assert FlippedJudge(multiset_judge, 1.0, 0)([same, other]) == [1.0, 0.0]  # exact at accuracy 1
    pairs = dice_pairs(2000, 7)
    # Another judge seed flips other pairs (at 0.5, about half of them differ).
    flips_a = np.array(FlippedJudge(multiset_judge, 0.5, 1)(pairs)) != multiset_judge(pairs)
    flips_b = np.array(FlippedJudge(multiset_judge, 0.5, 2)(pairs)) != multiset_judge(pairs)
    assert 0.4 < np.mean(flips_a != flips_b) < 0.6
    # A pair flipped at accuracy 0.9 stays flipped at 0.8: one draw per pair, thresholds nest.
    at_90 = np.array(FlippedJudge(multiset_judge, 0.9, 3)(pairs)) != multiset_judge(pairs)
    at_80 = np.array(FlippedJudge(multiset_judge, 0.8, 3)(pairs)) != multiset_judge(pairs)
    assert at_90.any() and not (at_90 & ~at_80).any()


def test_judge_accuracy_is_refused_outside_a_half_to_one_and_trains_only():
    for bad in (0.4, 1.01):
        with pytest.raises(
            ConfigError, match=r"^task\.judge_accuracy: must be (>= 0\.5|<= 1\.0), got"
        ) as err:
            validate_section(
                DigitSumTaskConfig, {"kind": "digit_sum", "judge_accuracy": bad}, "task"
            )
        assert "\n" not in str(err.value)
    raw = load_config(str(REPO / "conf" / "mini" / "dice_k.yaml"), [])
    with pytest.raises(ConfigError, match=r"judge_accuracy\.darling"):
        validate_section(MiniConfig, {**raw, "judge_accuracy": {"darling": 0.3}})
    with pytest.raises(ConfigError, match=r"judge_accuracy: \['darlin'\] are not arms"):
        validate_section(MiniConfig, {**raw, "judge_accuracy": {"darlin": 0.8}})
    cfg = validate_section(MiniConfig, {**raw, "judge_accuracy": {"darling": 0.7}})
    assert cfg.arm_run(1, "darling").task.judge_accuracy == 0.7
    assert cfg.arm_run(1, "grpo").task.judge_accuracy == 1.0
    task = build_task(cfg.arm_run(1, "darling"))
    assert task.judge == FlippedJudge(multiset_judge, 0.7, 0)  # trains with the flipped judge...
    assert task.evaluation_judge is multiset_judge  # ...and is measured exactly
    assert build_task(cfg.arm_run(1, "grpo")).judge is multiset_judge


def test_a_run_saved_before_the_judge_accuracy_keys_resumes_with_the_exact_judge():
    from darling_nemo.resume import changed_settings
    from darling_nemo.trl.run import with_keys_added_since

    raw = load_config(str(REPO / "conf" / "mini" / "dice_k.yaml"), [])
    run = validate_section(MiniConfig, raw).arm_run(1, "darling").model_dump(mode="json")
    saved = {**run, "task": {k: v for k, v in run["task"].items() if not k.startswith("judge_")}}
    assert changed_settings(with_keys_added_since(saved), run) == []
    noisy = {**run, "task": {**run["task"], "judge_accuracy": 0.8}}
    assert changed_settings(with_keys_added_since(saved), noisy) == [
        "task.judge_accuracy: 1.0 -> 0.8"
    ]


@settings(max_examples=40, deadline=None)
@given(target=st.integers(6, 36), exponent=st.floats(0, 3), seed=st.integers(0, 99))
def test_warm_start_answers_are_always_correct(target, exponent, seed):
    answer = DICE.sample_answer(target, exponent, seed, np.random.default_rng(seed))
    assert DICE.is_correct(prompt_text(target), " ".join(map(str, answer)))


def test_zipf_favourites():
    # Total 9 has 3 multisets; exponent 1 weights ranks 1 : 1/2 : 1/3 = 6/11, 3/11, 2/11.
    rng = np.random.default_rng(0)
    draws = Counter(
        tuple(sorted(DICE.sample_answer(9, 1.0, seed=5, rng=rng))) for _ in range(11000)
    )
    shares = sorted((c / 11000 for c in draws.values()), reverse=True)
    np.testing.assert_allclose(shares, [6 / 11, 3 / 11, 2 / 11], atol=0.02)
    # The favourite differs between targets and seeds but is fixed for a (seed, target).
    first = Counter(tuple(sorted(DICE.sample_answer(21, 5.0, 1, rng))) for _ in range(50))
    again = Counter(tuple(sorted(DICE.sample_answer(21, 5.0, 1, rng))) for _ in range(50))
    assert first.most_common(1)[0][0] == again.most_common(1)[0][0]


def test_heldout_targets_are_never_trained_on():
    cfg = DigitSumTaskConfig(kind="digit_sum")  # 12..30, every 4th from 13 held out
    targets = digit_sum_targets(cfg)
    assert targets["heldout"] == [13, 17, 21, 25, 29]
    assert not set(targets["heldout"]) & set(targets["train"])
    assert sorted(targets["train"] + targets["heldout"]) == list(range(12, 31))


def test_infeasible_task_configs_are_refused():
    with pytest.raises(ConfigError, match=r"need 6 <= min_target < max_target <= 36"):
        validate_section(DigitSumTaskConfig, {"kind": "digit_sum", "max_target": 40}, "task")
    with pytest.raises(ConfigError, match=r"task\.length"):
        validate_section(DigitSumTaskConfig, {"kind": "digit_sum", "length": 5}, "task")


def test_tokenizers_round_trip_through_save_and_load(tmp_path):
    from transformers import AutoTokenizer

    words = word_tokenizer(DICE.vocabulary())
    words.save_pretrained(tmp_path / "w")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "w")
    ids = loaded("T1 U3 6 1 3")["input_ids"]
    assert len(ids) == 5 and loaded.unk_token_id not in ids
    assert loaded.decode(ids[2:], skip_special_tokens=True) == "6 1 3"
    chars = char_tokenizer()
    chars.save_pretrained(tmp_path / "c")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "c")
    text = "Tell me a story,\n please!"
    assert loaded.decode(loaded(text)["input_ids"]) == text


def tiny_dice_policy(seed: int = 0):
    tokenizer = word_tokenizer(DICE.vocabulary())
    torch.manual_seed(seed)
    return tiny_llama(tokenizer, 32, 1, 2, 64, 12), tokenizer


def test_warm_start_teaches_the_format():
    model, tokenizer = tiny_dice_policy()
    data = WarmStartData(
        keys=list(range(12, 31)),
        prompt=prompt_text,
        answer=lambda t, rng: [str(d) for d in DICE.sample_answer(t, 1.0, 0, rng)],
    )
    losses = warm_start(
        model,
        tokenizer,
        data,
        40,
        32,
        3e-3,
        seed=0,
        optimizer="adamw_portable",
        progress=False,
    )
    # Cross-entropy over 7 predicted tokens starts near ln(vocab = 3 + 6 + 20 = 29) = 3.4 and
    # must fall well below it once the model predicts only faces then EOS.
    assert losses[0] > 2.5
    assert np.mean(losses[-5:]) < 2.0


def test_evaluation_counts_correct_and_distinct_answers():
    model, tokenizer = tiny_dice_policy()
    rows = [{"prompt": "T1 U2"}, {"prompt": "T2 U0"}]

    def always(prompts, completions, **_):
        return [1.0] * len(completions)

    kwargs = dict(
        judge=multiset_judge,
        threshold=0.5,
        num_samples=8,
        ks=[1, 8],
        max_new_tokens=7,
        temperature=1.0,
        seed=3,
    )
    everything = evaluate(model, tokenizer, rows, always, **kwargs)
    # Every sample counts as correct: pass@k = 1 and the correct classes are all classes.
    assert everything["pass@1"] == everything["pass@8"] == 1.0
    assert everything["distinct_correct"] == everything["distinct_all"] > 1
    real = evaluate(model, tokenizer, rows, digit_sum_quality(DICE), **kwargs)
    assert real["distinct_all"] == everything["distinct_all"]  # same seed, same samples
    assert 0.0 <= real["pass@1"] <= real["pass@8"] <= 1.0
    with pytest.raises(ValueError, match="1 <= k <= num_samples=8"):
        evaluate(model, tokenizer, rows, always, **{**kwargs, "ks": [16]})


def test_report_table_and_summary(tmp_path):
    run = tmp_path / "darling"
    run.mkdir()
    (run / "eval_history.jsonl").write_text(
        json.dumps({"step": 0, "pass@1": 0.3, "distinct_correct": 5.0, "distinct_all": 20.0})
        + "\n"
        + json.dumps({"step": 10, "pass@1": 0.5, "distinct_correct": 7.0, "distinct_all": 15.0})
        + "\n"
    )
    (run / "train_log.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "darling/diversity_mean": d}) + "\n"
            for s, d in [(1, 0.9), (2, 0.7)]
        )
    )
    summary = arm_summary(run, [1])
    assert summary == {
        "step": 10, "pass@1": 0.5, "distinct_correct": 7.0, "distinct_all": 15.0,
        "train_diversity_mean": pytest.approx(0.8),  # (0.9 + 0.7) / 2
    }  # fmt: skip
    table = format_table({"darling": summary}, ["pass@1", "distinct_correct"])
    assert table.splitlines() == [
        "| arm | pass@1 | distinct_correct |",
        "|---|---|---|",
        "| darling | 0.500 | 7.000 |",
    ]


def test_the_mini_recipe_end_to_end_and_rerun(tmp_path, capsys, monkeypatch):
    """The dice job at toy scale: 1 seed, its 2 arms and GRPO without std, 2 steps each, and the judge sweep's
    kind of arm (DARLING trained with a judge right on 60% of pairs); a rerun trains nothing.
    (The routes main job's reduced run is test_mini_reference.py's.)"""
    for name in PORTABLE_KERNELS:  # cpu_kernels: portable sets them; restored afterwards
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location(
        "darling_mini", REPO / "recipes" / "darling_mini.py"
    )
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    argv = [
        "--config",
        str(REPO / "conf" / "mini" / "dice_k.yaml"),
        f"output_dir={tmp_path}",
        "seeds=[3]",
        "warm_start.steps=5",
        "trainer.max_steps=2",
        "trainer.save_steps=1",
        "evaluation.every_steps=1",
        "evaluation.num_samples=4",
        "evaluation.pass_at_k=[1,4]",
        "differences=[pass@1,distinct_correct]",
        "logging.report_to=[]",
        "logging.progress_bar=false",
        "+arms.grpo_no_std={enabled: false}",
        "+arms.darling_judge60={}",
        "judge_accuracy={darling_judge60: 0.6}",
    ]
    result = recipe.main(argv)
    assert list(result["arms"]) == ["grpo", "darling", "grpo_no_std", "darling_judge60"]
    for name in result["arms"]:
        summary = result["arms"][name][3]
        assert summary["step"] == 2
        assert 0.0 <= summary["pass@1"] <= summary["pass@4"] <= 1.0
        assert [
            r["step"]
            for r in map(
                json.loads,
                (tmp_path / "seed-3" / name / "eval_history.jsonl").read_text().splitlines(),
            )
        ] == [0, 1, 2]
    for file in ("comparison.md", "comparison.json", "curves.png", "pass_at_k.png"):
        assert (tmp_path / file).stat().st_size > 0
    table = capsys.readouterr().out
    assert "| darling |" in table and "distinct_correct: darling - grpo" in table
    # The judge sweep's table: every arm's gain over GRPO, by its training judge's accuracy.
    sweep = table.split("Gain by the training judge's accuracy")[1].splitlines()
    assert (
        sweep[2]
        == "| judge accuracy | arm | pass@1 gain over grpo | distinct_correct gain over grpo |"
    )
    assert [row.split(" | ")[:2] for row in sweep[4:7]] == [
        ["| 1.00", "darling"], ["| 0.60", "darling_judge60"], ["| no judge", "grpo_no_std"]
    ]  # fmt: skip
    saved_runs = {
        name: yaml.safe_load((tmp_path / "seed-3" / name / "config.yaml").read_text())["task"]
        for name in ("darling", "darling_judge60")
    }
    assert saved_runs["darling_judge60"] == {**saved_runs["darling"], "judge_accuracy": 0.6}
    # What the numbers depend on besides the config is saved beside them.
    conditions = json.loads((tmp_path / "comparison.json").read_text())["conditions"]
    assert conditions["torch"] == torch.__version__
    assert conditions["torch_threads"] == 1  # the config's torch_threads, still set after TRL
    assert conditions["mkl_cbwr"] == "COMPATIBLE"  # cpu_kernels: portable
    assert f"torch_cpu_capability {torch.backends.cpu.get_cpu_capability()}" in table

    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("seed-3/*/final_metrics.json")}
    assert len(stamps) == len(result["arms"]) == 4
    first_report = (tmp_path / "comparison.md").read_text()
    assert f"wall time {result['wall_seconds']:.0f} s" in first_report
    assert "resumed" not in first_report
    again = recipe.main(argv)
    assert again["arms"] == result["arms"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing retrained
    # The rerun trained nothing: its report keeps the first run's seconds inside the total
    # and says which figure is which, instead of "wall time 0 s".
    assert again["wall_seconds"] == pytest.approx(
        result["wall_seconds"] + again["wall_seconds_this_run"]
    )
    rerun_report = (tmp_path / "comparison.md").read_text()
    assert (
        f"resumed: {again['wall_seconds_this_run']:.0f} s this run, "
        f"{again['wall_seconds']:.0f} s total over 2 runs" in rerun_report
    )
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved["wall_seconds"] == pytest.approx(again["wall_seconds"])

    # A warm start whose weights were cut short is named, moved aside and trained again
    # (the same bits: the manifest's hash), not loaded; the finished arms stay as they are.
    warm = tmp_path / "seed-3" / "warm_start"
    recorded = json.loads((warm / "manifest.json").read_text())["files"]["model.safetensors"]
    with (warm / "model.safetensors").open("r+b") as f:
        f.truncate(1000)
    capsys.readouterr()
    recipe.main(argv)
    (aside,) = (tmp_path / "seed-3").glob("damaged-warm_start-*")
    assert (
        f"warm_start is damaged (model.safetensors: 1000 bytes, manifest says "
        f"{recorded['size']}); moved aside to {aside.name}; it is trained again\n"
        in capsys.readouterr().out
    )
    assert sha256_of(warm / "model.safetensors") == recorded["sha256"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps

    # Other settings into the same output_dir: refused before anything trains, naming the
    # keys (the runs' and the warm start's), instead of reusing the old results.
    saved_config = (tmp_path / "config.yaml").read_text()
    for override, named in [
        ("trainer.learning_rate=0.001", "trainer.learning_rate: 0.0005 -> 0.001"),
        ("trainer.max_steps=3", "trainer.max_steps: 2 -> 3"),  # linear schedule: not resumable
        ("+arms.darling.quality_shift=group_min", "darling.quality_shift: 'none' -> 'group_min'"),
        ("warm_start.steps=6", "warm_start.steps: 5 -> 6"),
        ("policy.hidden_size=32", "policy.hidden_size: 64 -> 32"),
        ("cpu_kernels=native", "cpu_kernels: 'portable' -> 'native'"),  # other rounding
    ]:
        with pytest.raises(ConfigError, match="made with other settings") as err:
            recipe.main([*argv, override])
        assert named in str(err.value), str(err.value)
    assert (tmp_path / "config.yaml").read_text() == saved_config  # the refused one not saved
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # A warm start whose settings were not recorded is not trusted either.
    (tmp_path / "seed-3" / "warm_start" / "warm_start_settings.json").unlink()
    with pytest.raises(ConfigError, match="settings are unknown"):
        recipe.main(argv)


def test_report_names_the_file_and_line_of_a_bad_log_line(tmp_path):
    (tmp_path / "eval_history.jsonl").write_text('{"step": 0}\n{"step": 1\n')
    with pytest.raises(ValueError, match=r"eval_history\.jsonl:2: not valid JSON"):
        arm_summary(tmp_path, [1])


def test_evaluation_renders_a_conversational_prompt_in_the_chat_template():
    tokenizer = char_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    torch.manual_seed(0)
    model = tiny_llama(tokenizer, 32, 1, 2, 64, 32)
    torch.manual_seed(5)
    chat = sample_completions(model, tokenizer, [{"role": "user", "content": "Hi"}], 3, 6, 1.0)
    torch.manual_seed(5)
    # The same samples as the rendered text "<user>Hi\n<assistant>" given as a plain prompt.
    assert chat == sample_completions(model, tokenizer, "<user>Hi\n<assistant>", 3, 6, 1.0)
    assert len(chat) == 3


def test_paired_differences_and_their_interval_by_hand():
    per_arm = {
        "grpo": {1: {"pass@1": 0.5}, 2: {"pass@1": 0.6}},
        "darling": {1: {"pass@1": 1.5}, 2: {"pass@1": 3.6}},
    }
    # Differences 1.0 and 3.0: mean 2, sample std sqrt(2); t(0.975, df=1) = 12.706, so the
    # half-width is 12.706 * sqrt(2) / sqrt(2) = 12.706.
    low, high = paired_interval([1.0, 3.0])
    assert (low, high) == (
        pytest.approx(2 - 12.7062, abs=1e-4),
        pytest.approx(2 + 12.7062, abs=1e-4),
    )
    assert differences(per_arm, ["pass@1"]) == [
        "pass@1: darling - grpo = +2.000 on average (per seed: +1.000, +3.000; higher in 2/2 "
        "seeds; paired 95% t-interval [-10.706, +14.706])"
    ]
    one_seed = {name: {1: runs[1]} for name, runs in per_arm.items()}
    assert differences(one_seed, ["pass@1"])[0].endswith("higher in 1/1 seeds)")  # no interval
    # The judge sweep's table: rows by accuracy, highest first; darling at 0.8 gains 0.1 and
    # 0.3 (mean 0.2, std sqrt(0.02) = 0.1414, half-width 12.706 * 0.1414 / sqrt(2) = 1.2706).
    per_arm["darling_80"] = {1: {"pass@1": 0.6}, 2: {"pass@1": 0.9}}
    assert gains_by_judge_accuracy(
        {**per_arm, "grpo_no_std": per_arm["grpo"]},
        {"grpo": None, "darling_80": 0.8, "darling": 1.0, "grpo_no_std": None},
        ["pass@1"],
    ).splitlines() == [
        "| judge accuracy | arm | pass@1 gain over grpo |",
        "|---|---|---|",
        "| 1.00 | darling | +2.000 [-10.706, +14.706] |",
        "| 0.80 | darling_80 | +0.200 [-1.071, +1.471] |",
        "| no judge | grpo_no_std | +0.000 [+0.000, +0.000] |",
    ]


def test_a_band_is_mean_and_sample_std_over_seeds_at_shared_steps():
    # Step 20 is in one seed only (an unfinished run): not plotted. At step 10: mean of 0.7
    # and 0.9 is 0.8, sample std sqrt((0.1^2 + 0.1^2) / 1) = 0.1414.
    curve = band([{0: 0.5, 10: 0.7}, {0: 0.5, 10: 0.9, 20: 1.0}])
    assert curve.x == [0, 10] and curve.seeds == 2
    assert curve.mean.tolist() == pytest.approx([0.5, 0.8])
    assert curve.std.tolist() == pytest.approx([0.0, 0.1414], abs=1e-4)
    assert band([{0: 0.5}]).std.tolist() == [0.0]  # one seed: no spread, as in the table


PASS_AT_K = {  # two seeds; pass@k at the measured k = 1, 4, 16
    WARM_START_ROW: {1: {"pass@1": 0.4, "pass@4": 0.8, "pass@16": 1.0},
                     2: {"pass@1": 0.6, "pass@4": 0.9, "pass@16": 1.0}},
    "grpo": {1: {"pass@1": 0.9, "pass@4": 1.0, "pass@16": 1.0},
             2: {"pass@1": 0.8, "pass@4": 1.0, "pass@16": 1.0}},
    "darling": {1: {"pass@1": 0.85, "pass@4": 1.0, "pass@16": 1.0},
                2: {"pass@1": 0.85, "pass@4": 0.98, "pass@16": 1.0}},
}  # fmt: skip


def test_pass_at_k_plot_shows_the_measured_k_the_warm_start_and_error_bars(tmp_path):
    warm, per_arm = PASS_AT_K[WARM_START_ROW], {k: PASS_AT_K[k] for k in ("grpo", "darling")}
    bands = pass_at_k_bands(per_arm, warm, [1, 4, 16])
    assert list(bands) == [WARM_START_ROW, "grpo", "darling"]  # the reference comes first
    assert all(curve.x == [1, 4, 16] for curve in bands.values())
    assert bands[WARM_START_ROW].mean.tolist() == pytest.approx([0.5, 0.85, 1.0])
    # warm pass@1: 0.4 and 0.6 -> std sqrt(2 * 0.1^2 / 1) = 0.1414; grpo: 0.9, 0.8 -> 0.0707
    assert bands[WARM_START_ROW].std[0] == pytest.approx(0.1414, abs=1e-4)
    assert bands["grpo"].std[0] == pytest.approx(0.0707, abs=1e-4)

    fig = plot_pass_at_k(per_arm, warm, [1, 4, 16], tmp_path / "pass_at_k.png", "Dice task")
    assert (tmp_path / "pass_at_k.png").stat().st_size > 0
    (ax,) = fig.axes
    assert ax.get_xticks().tolist() == [1, 4, 16]  # not 2, 8: nothing was measured there
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]
    assert ax.get_title() == "Dice task"
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "error bars: ± 1 std over seeds"
    assert [t.get_text() for t in legend.get_texts()] == [
        "warm start (step 0) (mean of 2 seeds)", "grpo (mean of 2 seeds)",
        "darling (mean of 2 seeds)",
    ]  # fmt: skip
    assert len(ax.containers) == 3  # one errorbar container per curve


def write_run(run_dir: Path, evals: list[tuple[int, float, float]], correct: list[float]) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "eval_history.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "pass@1": p, "distinct_correct": d}) + "\n" for s, p, d in evals
        )
    )
    (run_dir / "train_log.jsonl").write_text(
        "".join(
            json.dumps(
                {"step": s, "darling/correct_fraction": c, "darling/diversity_mean": 1 - c / 2}
            )
            + "\n"
            for s, c in enumerate(correct, start=1)
        )
    )
    return run_dir


def test_curves_plot_titles_its_band_and_draws_the_warm_start(tmp_path):
    # Both arms start from the same warm start per seed (step 0): pass@1 0.4 and 0.6.
    run_dirs = {
        "grpo": [write_run(tmp_path / "s1" / "grpo", [(0, 0.4, 9), (2, 0.8, 5)], [0.5, 0.7]),
                 write_run(tmp_path / "s2" / "grpo", [(0, 0.6, 11), (2, 0.9, 6)], [0.6, 0.8])],
        "darling": [write_run(tmp_path / "s1" / "darling", [(0, 0.4, 9), (2, 0.7, 12)], [0.5, 0.6]),
                    write_run(tmp_path / "s2" / "darling", [(0, 0.6, 11), (2, 0.9, 14)], [0.6, 0.7])],
    }  # fmt: skip
    bands = curve_bands(run_dirs, "eval_history.jsonl", "distinct_correct")
    assert bands["darling"].x == [0, 2]
    assert bands["darling"].mean.tolist() == pytest.approx([10.0, 13.0])  # (9+11)/2, (12+14)/2
    fig = plot_curves(run_dirs, tmp_path / "curves.png", "Dice task\n2 seeds")
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert fig._suptitle.get_text() == "Dice task\n2 seeds"
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend.get_title().get_text() == "shaded: ± 1 std over seeds"
        assert len(ax.collections) == 2  # one band per arm
    held_out_pass, held_out_distinct, train_correct, _ = fig.axes
    for ax, warm_mean in [(held_out_pass, 0.5), (held_out_distinct, 10.0)]:
        (reference,) = [line for line in ax.lines if line.get_label() == WARM_START_ROW]
        assert list(reference.get_ydata()) == pytest.approx([warm_mean, warm_mean])
    # Training batches have no step 0: no warm-start reference there.
    assert WARM_START_ROW not in [line.get_label() for line in train_correct.lines]
    assert list(train_correct.lines[0].get_xdata()) == [1, 2]


def test_figure_title_names_the_task_and_the_settings():
    raw = load_config(str(REPO / "conf" / "mini" / "dice_k.yaml"), [])
    cfg = validate_section(MiniConfig, raw)
    title = task_of(cfg.task).miniature(cfg.task, cfg.warm_start).title
    assert figure_title(cfg, title).splitlines() == [
        "Dice task: 6 dice (1..6) totalling S; held out of RL: S = 13, 17, 21, 25, 29",
        "5 seeds, 200 RL steps of 14 prompts x 8 samples at T = 1; "
        "held-out: 128 samples / prompt at T = 1",
    ]


KERNEL_PROBE = """
import sys
from darling_nemo.mini.reproducibility import pin_cpu_kernels, run_conditions
warnings = pin_cpu_kernels(sys.argv[1])
conditions = run_conditions()
print(conditions["torch_cpu_capability"], conditions["mkl_cbwr"], len(warnings))
"""


def probe_kernels(kind: str) -> list[str]:
    """What a fresh process uses after pin_cpu_kernels(kind) (torch picks kernels once)."""
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_KERNELS}
    result = subprocess.run(
        [sys.executable, "-c", KERNEL_PROBE, kind], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_portable_cpu_kernels_are_torchs_avx2_kernels_and_mkls_compatible_branch():
    native = probe_kernels("native")
    if native[0] not in ("AVX2", "AVX512"):
        pytest.skip(f"portable kernels need an x86-64 CPU with AVX2 (torch uses {native[0]})")
    assert native[1:] == ["unset", "0"]  # native: torch and MKL choose
    assert probe_kernels("portable") == ["AVX2", "COMPATIBLE", "0"]


def test_portable_cpu_kernels_refuse_a_different_choice_in_the_environment(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(ConfigError, match="environment has ATEN_CPU_CAPABILITY=default"):
        pin_cpu_kernels("portable")
    assert "MKL_CBWR" not in os.environ  # refused before anything was set
    assert pin_cpu_kernels("native") == []  # native leaves the environment alone


def test_wall_time_adds_every_invocation_and_never_reports_a_rerun_alone(tmp_path):
    # First invocation: started at t=100, a warm start done at t=400, the report at t=754.
    first = WallTime(tmp_path, started=100.0)
    assert (first.earlier_s, first.earlier_runs) == (0.0, 0)
    first.save(400.0)
    assert first.save(754.0) == {"wall_seconds": 654.0, "wall_seconds_this_run": 654.0}
    assert wall_time_note(654.0, 654.0, first.earlier_runs) == "wall time 654 s"
    # A rerun that reuses everything: 3 s (t=10 -> 13) on top of the saved 654 s.
    rerun = WallTime(tmp_path, started=10.0)
    assert (rerun.earlier_s, rerun.earlier_runs) == (654.0, 1)
    assert rerun.save(13.0) == {"wall_seconds": 657.0, "wall_seconds_this_run": 3.0}
    assert wall_time_note(657.0, 3.0, rerun.earlier_runs).startswith(
        "resumed: 3 s this run, 657 s total over 2 runs"
    )
    assert json.loads((tmp_path / WALL_TIME).read_text()) == {"seconds": 657.0, "invocations": 2}


def test_wall_time_starts_from_a_report_written_before_the_ledger(tmp_path):
    # An output_dir whose comparison.json (older code) measured 654 s and has no wall_time.json.
    (tmp_path / "comparison.json").write_text(json.dumps({"wall_seconds": 654.0}))
    rerun = WallTime(tmp_path, started=0.0)
    assert rerun.save(2.0) == {"wall_seconds": 656.0, "wall_seconds_this_run": 2.0}
    assert wall_time_note(656.0, 2.0, rerun.earlier_runs).startswith(
        "resumed: 2 s this run, 656 s total over 2 runs"
    )
