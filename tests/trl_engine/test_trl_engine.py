"""The TRL adapter on hand-checked batches, its refusals, and TRL seeing exactly the core's advantage.

Arithmetic in the comments. DarlingReward returns the core's advantage; TRL (with
scale_rewards='none') subtracts the group mean again, which changes nothing because every
group's advantages already sum to 0 (the property test), and the integration test checks
that in a real GRPOTrainer step.
"""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
import torch
from helpers import REPO, metrics_of_both_engines, one_trl_step, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import darling_batch
from darling_nemo.mini.task import DigitSum, multiset_judge
from darling_nemo.schema import DarlingConfig, validate_darling
from darling_nemo.tasks.chat import length_stand_in_quality
from darling_nemo.tasks.digit_sum import digit_sum_quality
from darling_nemo.tasks.rows import completion_text
from darling_nemo.trl.reward import DarlingReward


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # Tiny models: one thread is fastest, and far faster when other processes share the CPU.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def constant_quality(values):
    """A quality function returning fixed values and recording the kwargs it saw."""

    def quality(prompts, completions, **kwargs):
        quality.seen = kwargs
        return list(values)

    quality.seen = {}
    return quality


def test_lexical_judge_batch_by_hand():
    # Group p1 (4 long answers): 0 and 1 are exact duplicates -> classes {0,1},{2},{3};
    #   diversity (4-2)/3 = 2/3, 2/3, 1, 1; quality 1,1,0,1 -> reward 2/3, 2/3, 0, 1;
    #   mean 7/12 -> advantage 1/12, 1/12, -7/12, 5/12.
    # Group p2 (short answers): yes=yes (duplicate), "yes" ~ "yes no" (1 shared word,
    #   2*1 >= 2), "no" ~ "yes no" likewise -> one class of 4 -> diversity 0 -> floor 0.1;
    #   quality 1,0,1,1 -> reward .1, 0, .1, .1; mean .075 -> advantage .025, -.075, .025, .025.
    prompts = ["p1"] * 4 + ["p2"] * 4
    completions = [
        "a b c d e f", "a b c d e f", "g h i j k l", "m n o p q r",
        "yes", "yes", "no", "yes no",
    ]  # fmt: skip
    reward = DarlingReward(
        constant_quality([1, 1, 0, 1, 1, 0, 1, 1]), DarlingConfig(), 4, judge=None
    )
    advantage = reward(prompts, completions)
    expected = [1 / 12, 1 / 12, -7 / 12, 5 / 12, 0.025, -0.075, 0.025, 0.025]
    np.testing.assert_allclose(advantage, expected, atol=1e-12)
    np.testing.assert_allclose(
        reward.last_batch.diversity, [2 / 3, 2 / 3, 1, 1, 0.1, 0.1, 0.1, 0.1]
    )
    assert reward.last_batch.num_classes == [3, 1]


def test_the_judge_decides_long_answers():
    # Multiset judge: "1 2 3 4 5 6" ~ "6 5 4 3 2 1" -> classes {0,1},{2},{3};
    # diversity 2/3, 2/3, 1, 1 = reward (quality 1); mean 5/6 -> -1/6, -1/6, 1/6, 1/6.
    completions = ["1 2 3 4 5 6", "6 5 4 3 2 1", "1 1 3 4 5 6", "2 2 2 2 2 2"]
    with_judge = DarlingReward(constant_quality([1] * 4), DarlingConfig(), 4, judge=multiset_judge)
    np.testing.assert_allclose(with_judge(["S"] * 4, completions), [-1 / 6, -1 / 6, 1 / 6, 1 / 6])
    # Lexical rules alone: six distinct words each, never equal -> all diversity 1 -> advantage 0.
    lexical = DarlingReward(constant_quality([1] * 4), DarlingConfig(), 4, judge=None)
    np.testing.assert_allclose(lexical(["S"] * 4, completions), [0, 0, 0, 0])


def test_grpo_baseline_settings_normalise_by_the_sample_std():
    # enabled false: reward = quality 1,0,0,1; mean .5; sample std (ddof 1)
    # sqrt(4 * .25 / 3) = 0.57735 -> advantage +-0.5 / (0.57735 + 1e-6) = +-0.866024.
    grpo = validate_darling({"enabled": False, "normalize_std": True})
    reward = DarlingReward(constant_quality([1, 0, 0, 1]), grpo, 4, judge=None)
    out = reward(["p"] * 4, ["a b c d e f", "a b c d e f", "x", "y"])
    scale = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(out, [scale, -scale, -scale, scale], rtol=1e-12)


def test_weighted_quality_functions_skip_none_like_trl():
    # q = 1*f1 + 2*f2 over the non-None values: [1+1, 2*1, 0, 1] = [2, 2, 0, 1].
    # Distinct long answers (diversity 1) -> reward = q; mean 1.25 -> .75, .75, -1.25, -.25.
    f1 = constant_quality([1, None, 0, 1])
    f2 = constant_quality([0.5, 1, None, None])
    reward = DarlingReward([f1, f2], DarlingConfig(), 4, judge=None, weights=[1.0, 2.0])
    out = reward(["p"] * 4, ["a b c d e f", "g h i j k l", "m n o p q r", "s t u v w x"])
    np.testing.assert_allclose(out, [0.75, 0.75, -1.25, -0.25])
    np.testing.assert_allclose(reward.last_batch.quality, [2, 2, 0, 1])


def test_a_response_without_any_quality_is_refused():
    f1 = constant_quality([1, None, 0, 1])
    with pytest.raises(ValueError, match="returned None for completion 1"):
        DarlingReward([f1], DarlingConfig(), 4, judge=None)(["p"] * 4, ["a"] * 4)
    with pytest.raises(ValueError, match="returned nan for completion 0"):
        DarlingReward(constant_quality([float("nan")] * 4), DarlingConfig(), 4, judge=None)(
            ["p"] * 4, ["a"] * 4
        )


def test_kwargs_reach_the_quality_function_and_metrics_reach_log_metric():
    quality = constant_quality([1, 0, 1, 1])
    logged: dict[str, float] = {}
    reward = DarlingReward(quality, DarlingConfig(), 4, judge=None)
    reward(
        ["p"] * 4,
        ["a b c d e f", "a b c d e f", "x y z", "x y z"],
        answer=["42"] * 4,
        log_metric=logged.__setitem__,
    )
    assert quality.seen["answer"] == ["42"] * 4
    # classes {0,1},{2,3}: diversity (4-2)/3 = 2/3 each; correct rows 0, 2, 3 -> 2 classes
    assert logged["darling/quality_mean"] == pytest.approx(0.75)
    assert logged["darling/diversity_mean"] == pytest.approx(2 / 3)
    assert logged["darling/classes_per_group"] == 2
    assert logged["darling/distinct_correct_per_group"] == 2
    assert set(logged) == set(reward.last_metrics)


def test_groups_must_be_whole_blocks_of_one_prompt():
    reward = DarlingReward(constant_quality([1] * 6), DarlingConfig(), 4, judge=None)
    with pytest.raises(ValueError, match="not a multiple of group_size=4"):
        reward(["p"] * 6, ["a"] * 6)
    reward = DarlingReward(constant_quality([1] * 8), DarlingConfig(), 4, judge=None)
    with pytest.raises(ValueError, match=r"rows 0\.\.3 mix prompts"):
        reward(["p", "p", "q", "q"] * 2, ["a"] * 8)
    # The same prompt text in two blocks stays two groups (TRL's baseline treats them so).
    reward = DarlingReward(
        constant_quality([1, 1, 0, 0, 1, 0, 0, 0]), DarlingConfig(), 4, judge=None
    )
    out = reward(["p"] * 8, [f"w{i} x y z u v" for i in range(8)])
    np.testing.assert_allclose(out, [0.5, 0.5, -0.5, -0.5, 0.75, -0.25, -0.25, -0.25])


def test_conversational_completions_are_read_as_text():
    assert completion_text([{"role": "assistant", "content": "hi there"}]) == "hi there"
    assert completion_text("plain") == "plain"
    parts = [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        }
    ]
    assert completion_text(parts) == "ab"


def test_conversational_batches_give_the_same_advantage_as_plain_text():
    # TRL hands conversational prompts and completions as message lists; the adapter (and
    # the quality functions) must see the same texts and groups as in the plain form.
    prompts = ["p1"] * 4 + ["p2"] * 4
    texts = ["a b c d e f", "a b c d e f", "g h i j k l", "m n o p q r", "yes", "yes", "no", "x"]
    quality = length_stand_in_quality(6)
    plain = DarlingReward(quality, DarlingConfig(), 4, judge=None)(prompts, texts)
    chat = DarlingReward(quality, DarlingConfig(), 4, judge=None)(
        [[{"role": "user", "content": p}] for p in prompts],
        [[{"role": "assistant", "content": t}] for t in texts],
    )
    assert chat == plain and any(chat)
    # The digit task's verifier reads the target from a conversational prompt too.
    check = digit_sum_quality(DigitSum(6, 1, 6))
    assert check(
        prompts=[[{"role": "user", "content": "T2 U1"}]],
        completions=[[{"role": "assistant", "content": "6 1 3 4 2 5"}]],  # 21
    ) == [1.0]


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(1, 4),
    size=st.integers(2, 6),
    data=st.data(),
    baseline=st.sampled_from(["mean", "leave_one_out"]),
    normalize_std=st.booleans(),
    fusion=st.sampled_from(["multiplicative", "additive", "quality_only"]),
)
def test_advantages_have_zero_group_mean_so_trl_passes_them_through(
    groups, size, data, baseline, normalize_std, fusion
):
    n = groups * size
    quality = data.draw(st.lists(st.floats(-3, 3), min_size=n, max_size=n))
    words = data.draw(
        st.lists(st.sampled_from(["a b c d e f", "a", "b", "a b"]), min_size=n, max_size=n)
    )
    cfg = validate_darling({"baseline": baseline, "normalize_std": normalize_std, "fusion": fusion})
    reward = DarlingReward(constant_quality(quality), cfg, size, judge=None)
    out = np.asarray(reward([f"p{i // size}" for i in range(n)], words))
    # TRL with scale_rewards="none": A = r - mean_group(r). Applying it changes nothing.
    trl_view = out - out.reshape(groups, size).mean(axis=1).repeat(size)
    np.testing.assert_allclose(trl_view, out, atol=1e-9)
    core = darling_batch(words, quality, [i // size for i in range(n)], None, cfg.settings())
    np.testing.assert_allclose(out, core.advantage)


# ------------------------------------------------------------------------- TRL settings


def grpo_config(tmp_path, **overrides):
    from trl import GRPOConfig

    base = dict(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        num_generations=4,
        per_device_train_batch_size=8,
        scale_rewards="none",
        loss_type="bnpo",
        report_to=[],
    )
    return GRPOConfig(**{**base, **overrides})


def test_consistent_trl_settings_pass(tmp_path):
    reward = DarlingReward(constant_quality([1]), DarlingConfig(), 4, judge=None)
    reward.check_trainer_args(grpo_config(tmp_path), [reward])
    reward.check_trainer_args(grpo_config(tmp_path, loss_type="dapo"), [reward])


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"scale_rewards": "group"}, ["scale_rewards='group'", "darling.normalize_std"]),
        ({"scale_rewards": "batch"}, ["scale_rewards='batch'"]),
        ({"loss_type": "grpo"}, ["loss_type='grpo'", "token-level"]),
        ({"loss_type": "dr_grpo"}, ["loss_type='dr_grpo'"]),
        ({"multi_objective_aggregation": "normalize_then_sum"}, ["multi_objective_aggregation"]),
        ({"num_generations": 8}, ["num_generations=8", "group_size=4"]),
        ({"reward_weights": [2.0]}, ["reward_weights"]),
    ],
)
def test_contradicting_trl_settings_are_refused_by_name(tmp_path, override, words):
    reward = DarlingReward(constant_quality([1]), DarlingConfig(), 4, judge=None)
    with pytest.raises(ValueError, match="contradict DARLING") as err:
        reward.check_trainer_args(grpo_config(tmp_path, **override), [reward])
    for word in words:
        assert word in str(err.value)


def test_other_reward_functions_next_to_the_adapter_are_refused(tmp_path):
    reward = DarlingReward(constant_quality([1]), DarlingConfig(), 4, judge=None)
    with pytest.raises(ValueError, match="reward_funcs must be"):
        reward.check_trainer_args(grpo_config(tmp_path), [reward, constant_quality([1])])


def test_both_engines_log_the_same_darling_metrics():
    """The TRL reward and the NeMo-RL transform, fed the same two groups, log the same
    darling/* names with the same values (metrics.darling_step_metrics)."""
    # Group p: "x", "x", "y z", "w" with quality 1, 1, 1, 0 -> classes {0,1}, {2}, {3}
    # (short answers without shared words differ). Group q: "u" four times -> one class.
    texts = ["x", "x", "y z", "w", "u", "u", "u", "u"]
    quality = [1, 1, 1, 0, 1, 1, 1, 1]
    darling = validate_darling({"judge": {"kind": "lexical"}})
    logged = metrics_of_both_engines(darling, PairsJudge, texts, quality)
    # Hand values: classes 3 and 1 -> mean 2; hist/1 = hist/3 = 1/2; q collapsed -> 1/2;
    # distinct correct answers: p {x}, {y z} -> 2, q -> 1; mean 1.5. No pair needed the
    # judge (all answers are short), so it was never called.
    assert logged["darling/classes_per_group"] == 2.0
    assert logged["darling/classes_per_group_hist/3"] == 0.5
    assert logged["darling/collapsed_group_share"] == 0.5
    assert logged["darling/distinct_correct_per_group"] == 1.5
    assert (logged["darling/judge_calls"], logged["darling/pairs_judged"]) == (0.0, 0.0)
    assert logged["darling/num_groups"] == 2.0


class PairsJudge:
    """P(similar) = 0.9 when the first words agree, else 0.1; counts its requests."""

    def __init__(self):
        self.stats = {"requests": 0}

    def __call__(self, pairs):
        self.stats["requests"] += 1
        return [0.9 if a.split()[0] == b.split()[0] else 0.1 for a, b in pairs]


def test_the_judge_is_counted_in_the_trl_metrics():
    # Three 9-word answers: the lexical rules cannot decide, so all C(3,2) = 3 pairs go to
    # the judge (in one or more calls); (0,1) share the first word -> classes {0,1}, {2}.
    long_a, long_b = "alpha " + "w " * 8, "beta " + "w " * 8
    logged: dict[str, float] = {}
    darling = validate_darling({"judge": {"kind": "lexical"}})
    DarlingReward(constant_quality([1, 1, 1]), darling, 3, judge=PairsJudge())(
        ["p"] * 3, [long_a, long_a + "x", long_b], log_metric=logged.__setitem__
    )
    assert logged["darling/judge_calls"] >= 1.0
    assert logged["darling/judge_requests"] == logged["darling/judge_calls"]  # its own stats
    assert logged["darling/pairs_judged"] == 3.0 and logged["darling/pairs_total"] == 3.0
    assert logged["darling/classes_per_group"] == 2.0


# ------------------------------------------------------------------- inside a real TRL step


def test_trl_trains_on_exactly_the_core_advantage(tmp_path, monkeypatch):
    """One real GRPOTrainer step: the advantages TRL logs are the adapter's, row for row."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from darling_nemo.tasks.chat import length_stand_in_quality

    rows = [{"prompt": "Tell me a story."}, {"prompt": "Write a poem."}]
    task = {"task": {"kind": "chat", "data_path": "unused.jsonl"}}
    trainer, reward, future_warnings = one_trl_step(
        tmp_path, task, rows, length_stand_in_quality(6), max_completion_length=12
    )
    # TRL's defaults under deprecated names warned on every run (issue 11): none left
    assert future_warnings == []
    # Random characters: word counts differ, so quality (min(words, 6) / 6) varies.
    assert np.abs(reward.last_batch.advantage).sum() > 0
    logged = trainer.state.log_history[0]
    assert logged["darling/quality_mean"] == pytest.approx(
        reward.last_batch.quality.mean(), rel=1e-6
    )


CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_a_policy_with_a_chat_template_is_prompted_in_it(tmp_path, monkeypatch):
    """A chat policy gets each prompt as a user message; TRL renders the chat template and
    hands the quality function and DARLING message lists, which they read as text."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from darling_nemo.trl.policy import char_tokenizer, tiny_llama
    from darling_nemo.trl.reward import conversational
    from darling_nemo.trl.run import grpo_args, upstream_deprecations_silenced, validate_trl_config

    tokenizer = char_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    tiny_llama(tokenizer, 32, 1, 2, 64, 64).save_pretrained(tmp_path / "policy")
    tokenizer.save_pretrained(tmp_path / "policy")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "policy")  # the template survives
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    assert tokenizer.chat_template == CHAT_TEMPLATE

    cfg = validate_trl_config(
        {
            "engine": "trl",
            "output_dir": str(tmp_path / "run"),
            "policy": {"kind": "pretrained", "name_or_path": str(tmp_path / "policy")},
            "task": {"kind": "chat", "data_path": "unused.jsonl"},
            "trainer": {"max_steps": 1, "prompts_per_step": 2, "group_size": 4,
                        "max_completion_length": 12},
            "logging": {"report_to": [], "progress_bar": False},
        }
    )  # fmt: skip
    rows = conversational([{"prompt": "Tell me a story."}, {"prompt": "Write a poem."}])
    assert rows[0]["prompt"] == [{"role": "user", "content": "Tell me a story."}]
    seen = {}
    stand_in = length_stand_in_quality(6)

    def quality(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions)
        return stand_in(prompts, completions)

    reward = DarlingReward(quality, cfg.darling, 4, judge=None)
    generated_inputs = []
    model.model.embed_tokens.register_forward_hook(
        lambda module, args, output: generated_inputs.append(args[0].clone())
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=grpo_args(cfg, tmp_path / "run"),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    with upstream_deprecations_silenced():
        trainer.train()
    # The first forward pass is the generation's prefill: the prompt in the chat template.
    prefill = tokenizer.decode(generated_inputs[0][0], skip_special_tokens=True)
    assert prefill.endswith("<user>Tell me a story.\n<assistant>"), prefill
    assert seen["prompts"][0] == rows[0]["prompt"]
    assert all(c[0]["role"] == "assistant" for c in seen["completions"])
    texts = [completion_text(c) for c in seen["completions"]]
    np.testing.assert_allclose(
        reward.last_batch.quality, [min(len(t.split()), 6) / 6 for t in texts]
    )


# ---------------------------------------------------------------- config checks and notes


def test_validate_trl_config_refuses_a_bad_config_without_importing_torch():
    script = (
        "import sys\n"
        "from darling_nemo.config import load_config\n"
        "from darling_nemo.schema import ConfigError\n"
        "from darling_nemo.trl import validate_trl_config\n"
        "cfg = load_config('conf/local/math_trl.yaml', ['darling.judge.kind=bogus'])\n"
        "try:\n"
        "    validate_trl_config(cfg)\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
        "cfg = validate_trl_config(load_config('conf/local/math_trl.yaml', ['darling.floor=0.2']))\n"
        "print(type(cfg).__name__, cfg.darling.floor)\n"
    )
    out = run_python("-c", script, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "darling.judge.kind: 'bogus' is not one of lexical, cross_encoder, embedding, served, "
        "ray_pool",
        "torch imported: False",
        "TrlRunConfig 0.2",
    ]


def test_the_math_smoke_run_says_why_its_reward_is_zero():
    from darling_nemo.config import load_config
    from darling_nemo.trl.run import validate_trl_config, zero_reward_note

    smoke = validate_trl_config(load_config(REPO / "conf" / "local" / "math_trl.yaml"))
    note = zero_reward_note(smoke)
    assert note is not None and "quality is 0" in note and "loss is 0 at every step" in note
    pretrained = validate_trl_config(
        load_config(
            REPO / "conf" / "local" / "math_trl.yaml",
            ["policy={kind: pretrained, name_or_path: some/model}"],
        )
    )
    assert zero_reward_note(pretrained) is None
    chat = validate_trl_config(load_config(REPO / "conf" / "local" / "wildchat_trl.yaml"))
    assert zero_reward_note(chat) is None  # the length stand-in scores every response


def test_a_reward_model_path_that_is_no_folder_is_refused_naming_the_key(tmp_path):
    # the chat task names its reward model to the registry (Task.model_paths)
    import re

    from darling_nemo.config import load_config
    from darling_nemo.schema import ConfigError
    from darling_nemo.trl.run import check_model_paths, validate_trl_config

    config = REPO / "conf" / "local" / "wildchat_trl.yaml"
    missing = tmp_path / "no-such-rm"
    quality = f"task.quality={{kind: reward_model, name_or_path: {missing}}}"
    expected = f"task.quality.name_or_path: no such model folder {missing}"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        check_model_paths(validate_trl_config(load_config(config, [quality])))
    missing.mkdir()
    check_model_paths(validate_trl_config(load_config(config, [quality])))
    check_model_paths(validate_trl_config(load_config(config)))  # the length stand-in


def test_a_missing_task_file_names_the_key(tmp_path):
    from darling_nemo.schema import ConfigError
    from darling_nemo.trl.run import validate_trl_config
    from darling_nemo.trl.tasks import build_task

    missing = tmp_path / "none.jsonl"
    cfg = validate_trl_config(
        {"engine": "trl", "task": {"kind": "chat", "data_path": str(missing)}}
    )
    with pytest.raises(ConfigError, match=rf"^task\.data_path: {missing}: no such file$"):
        build_task(cfg)


def long_math_data(tmp_path):
    """Three math rows, the second a 200,000-character question (40,000 words)."""
    path = tmp_path / "math.jsonl"
    rows = [
        {"question": "What is 1 + 1?", "answer": "2"},
        {"question": "Add these. " + "seven " * 33_332, "answer": "7"},
        {"question": "What is 2 + 3?", "answer": "5"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_prompt_over_the_budget_is_refused_at_the_data_check_with_its_row(tmp_path, capsys):
    data = long_math_data(tmp_path)
    out = tmp_path / "run"
    spec = importlib.util.spec_from_file_location("darling_math", REPO / "recipes/darling_math.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    code = recipe.main(
        [
            "--config",
            str(REPO / "conf/local/math_trl.yaml"),
            f"task.data_path={data}",
            f"output_dir={out}",
            "task.heldout_prompts=1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    words = 2 + 33_332 + 6  # "Add these.", the sevens, the template's instruction
    assert err.strip().splitlines() == [
        f"darling_math: {REPO / 'conf/local/math_trl.yaml'}: {data}:2: a prompt of {words} "
        "tokens, over task.max_prompt_tokens=2048 (the policy's prompt budget): shorten or "
        "drop the row, raise task.max_prompt_tokens, or set task.long_prompts=truncate"
    ]
    assert not out.exists()  # refused before anything is written


def test_a_prompt_over_the_budget_is_cut_with_one_warning_when_asked(tmp_path, capsys):
    from darling_nemo.trl.run import validate_trl_config
    from darling_nemo.trl.tasks import build_task

    cfg = validate_trl_config(
        {
            "engine": "trl",
            "task": {
                "kind": "math",
                "data_path": str(long_math_data(tmp_path)),
                "long_prompts": "truncate",
                "max_prompt_tokens": 100,
            },
            "darling": {"judge": {"kind": "lexical"}},
        }
    )
    rows = build_task(cfg).train_rows
    printed = capsys.readouterr().out
    assert printed.count("warning:") == 1
    assert (
        "1 prompt(s) of " in printed and "were cut to fit (task.long_prompts=truncate)" in printed
    )
    assert "the longest, line 2, had 33340 tokens" in printed
    cut = rows[1]["prompt"]
    assert len(cut.split()) == 100
    assert cut.startswith("Add these. seven") and cut.endswith("within \\boxed{}.")
    assert rows[0]["prompt"].startswith("What is 1 + 1?")  # within the budget: as it was


def test_a_run_saved_before_the_prompt_budget_resumes_as_before(tmp_path):
    import yaml

    from darling_nemo.schema import ConfigError
    from darling_nemo.trl.run import check_resume_config, validate_trl_config

    raw = {
        "engine": "trl",
        "output_dir": str(tmp_path),
        "task": {"kind": "chat", "data_path": "p.jsonl"},
    }
    saved = validate_trl_config(raw).model_dump(mode="json")
    for key in ("max_prompt_tokens", "long_prompts"):  # what an earlier version saved
        del saved["task"][key]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    check_resume_config(validate_trl_config(raw))  # the defaults are that run's behaviour
    cut = {**raw, "task": {**raw["task"], "long_prompts": "truncate"}}
    with pytest.raises(ConfigError, match=r"task\.long_prompts: 'refuse' -> 'truncate'"):
        check_resume_config(validate_trl_config(cut))


def test_a_reward_funcs_run_saved_before_answer_func_resumes_as_before(tmp_path):
    import yaml

    from darling_nemo.schema import ConfigError
    from darling_nemo.trl.run import check_resume_config, validate_trl_config

    task = {"kind": "reward_funcs", "data_path": "p.jsonl", "reward_funcs": ["m:f"]}
    raw = {"engine": "trl", "output_dir": str(tmp_path), "task": task}
    saved = validate_trl_config(raw).model_dump(mode="json")
    del saved["task"]["answer_func"]  # what a run saved before the key was written
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    check_resume_config(validate_trl_config(raw))  # no answer function: that run's behaviour
    named = {**raw, "task": {**task, "answer_func": "m:g"}}
    with pytest.raises(ConfigError, match=r"task\.answer_func: None -> 'm:g'"):
        check_resume_config(validate_trl_config(named))


def test_data_columns_refuse_values_of_the_wrong_type_naming_file_line_and_key():
    from darling_nemo.config import ConfigError
    from darling_nemo.tasks.rows import column, is_answer, is_chat_prompt

    turns = [{"role": "user", "content": "Tell me a story."}]
    rows = [{"prompt": "a story?", "answer": 70}, {"prompt": turns, "answer": "70"}]
    assert column(rows, [3, 5], "answer", "d.jsonl", "task.answer_key", is_answer) == [70, "70"]
    assert column(rows, [3, 5], "prompt", "d.jsonl", "task.prompt_key", is_chat_prompt)[1] == turns
    refused = [  # (row, accepts, message)
        ({"question": 42}, None, "d.jsonl:7: 'question' is a number (42), not a string"),
        ({"question": None}, None, "d.jsonl:7: 'question' is null (None), not a string"),
        ({"question": True}, is_answer, "d.jsonl:7: 'question' is a boolean (True), not a"),
        ({"question": [{"role": "user"}]}, is_chat_prompt, "'question' is an array"),
    ]
    for row, accepts, message in refused:
        check = {} if accepts is None else {"accepts": accepts}
        with pytest.raises(ConfigError) as err:
            column([row], [7], "question", "d.jsonl", "task.question_key", **check)
        assert message in str(err.value), err.value
