"""The rival methods through the TRL engine (`darling.method`, `fusion: gdpo`): the adapter
returns the core's advantage, which TRL's own baseline leaves unchanged; one real TRL step
trains on it; both engines log the same darling/* metrics; configs a method cannot serve are
refused by key."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import metrics_of_both_engines, one_trl_step

from darling_nemo.core import darling_batch
from darling_nemo.methods.unlikeliness import unlikeliness_rewards
from darling_nemo.mini.task import DigitSum, JudgeWithEmbeddings, multiset_judge
from darling_nemo.schema import ConfigError, MiniConfig, validate_darling, validate_section
from darling_nemo.trl.logprobs import LOGPROBS_FIELD
from darling_nemo.trl.reward import DarlingReward

METHODS = {
    "pass_at_k": {"method": "pass_at_k", "k": 2},
    "outcome": {"method": "outcome", "outcome_coef": 1.0},
    "gdpo": {"fusion": "gdpo"},
    "unlikeliness": {"method": "unlikeliness"},
    "pkpo": {"method": "pkpo", "pkpo_k": 2},
    "dqo": {"method": "dqo"},
}

# Two dice prompts, 4 answers each. p: "1 2 3 4 5 6" twice and a shuffle of it (one multiset),
# and "6 6 6 1 1 1"; q: four different multisets.
DICE = [
    "1 2 3 4 5 6", "1 2 3 4 5 6", "6 5 4 3 2 1", "6 6 6 1 1 1",
    "1 1 1 1 1 6", "2 2 2 2 2 1", "3 3 3 1 1 2", "4 4 1 1 1 2",
]  # fmt: skip
QUALITY = [1, 1, 1, 0, 0, 1, 0, 0]
PROMPTS = ["p"] * 4 + ["q"] * 4
LOGPROBS = [-1.0, -3.0, -2.0, -0.5, -4.0, -1.5, -0.25, -2.5]  # the unlikeliness reward's input
# The dice task's judge as the TRL run gives it to DQO: with the multisets' embeddings.
DICE_JUDGE = JudgeWithEmbeddings(multiset_judge, DigitSum(6, 1, 6).embed)


def inputs_of(method: str) -> dict[str, list[float]]:
    """The reward keywords TRL passes for a method (with_sequence_logprobs' log-probs)."""
    return {LOGPROBS_FIELD: LOGPROBS} if method == "unlikeliness" else {}


def constant_quality(values):
    def quality(prompts, completions, **kwargs):
        return list(values)

    return quality


def test_outcome_through_the_adapter_by_hand():
    # p: answers {0,1,2} one multiset (3 members: 2 repeats each), {3} alone; coef 1, n = 4:
    #   reward 1 - 2/4, 1 - 2/4, 1 - 2/4, 0 = .5, .5, .5, 0; mean .375 -> .125 x3, -.375.
    # q: four multisets, no repeats: reward = quality 0, 1, 0, 0; mean .25 -> -.25, .75, ...
    darling = validate_darling(METHODS["outcome"])
    reward = DarlingReward(constant_quality(QUALITY), darling, 4, judge=multiset_judge)
    out = reward(PROMPTS, DICE)
    np.testing.assert_allclose(out, [0.125, 0.125, 0.125, -0.375, -0.25, 0.75, -0.25, -0.25])
    assert reward.last_batch.num_classes == [2, 4]


def test_pass_at_k_through_the_adapter_by_hand():
    # p: n=4, c=3, k=2: n - c = 1 < k, every pair holds a correct answer: degenerate, 0.
    # q: n=4, c=1, k=2: rho = 1 - C(3,2)/C(4,2) = 1/2, sigma 1/2; correct (1/2)/(1/2) = 1;
    #   tail C(2,1)/C(3,1) = 2/3, incorrect (1/2 - 2/3)/(1/2) = -1/3.
    darling = validate_darling(METHODS["pass_at_k"])
    reward = DarlingReward(constant_quality(QUALITY), darling, 4, judge=multiset_judge)
    np.testing.assert_allclose(reward(PROMPTS, DICE), [0, 0, 0, 0, -1 / 3, 1, -1 / 3, -1 / 3])


def test_unlikeliness_through_the_adapter_by_hand():
    # p: log-probs -1, -3, -2, -0.5 rank 2, 0, 1, 3 (0 = least likely); n = 4, penalty 1/4:
    #   rewards 1 - 2/16, 1, 1 - 1/16, 0 (incorrect) = .875, 1, .9375, 0; mean .703125.
    # q: log-probs -4, -1.5, -0.25, -2.5 rank 0, 2, 3, 1; only row 5 correct: 1 - 2/16 =
    #   .875; mean .21875.
    darling = validate_darling(METHODS["unlikeliness"])
    reward = DarlingReward(constant_quality(QUALITY), darling, 4, judge=multiset_judge)
    out = reward(PROMPTS, DICE, **inputs_of("unlikeliness"))
    want = [0.171875, 0.296875, 0.234375, -0.703125, -0.21875, 0.65625, -0.21875, -0.21875]
    np.testing.assert_allclose(out, want)


@pytest.mark.parametrize("method", METHODS)
def test_the_adapter_returns_the_core_advantage_and_trls_baseline_keeps_it(method):
    darling = validate_darling(METHODS[method])
    reward = DarlingReward(constant_quality(QUALITY), darling, 4, judge=DICE_JUDGE)
    out = np.asarray(reward(PROMPTS, DICE, **inputs_of(method)))
    logprobs = LOGPROBS if method == "unlikeliness" else None
    groups = [0] * 4 + [1] * 4
    core = darling_batch(DICE, QUALITY, groups, DICE_JUDGE, darling.settings(), logprobs=logprobs)
    np.testing.assert_allclose(out, core.advantage)
    # TRL with scale_rewards="none": A = r - mean_group(r), which changes nothing here.
    trl_view = out - out.reshape(2, 4).mean(axis=1).repeat(4)
    np.testing.assert_allclose(trl_view, out, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_both_engines_log_the_same_metrics_for_every_method(method):
    darling = validate_darling(METHODS[method])
    logprobs = LOGPROBS if method == "unlikeliness" else None
    logged = metrics_of_both_engines(darling, lambda: DICE_JUDGE, DICE, QUALITY, logprobs)
    # every method partitions here (the multiset judge): classes p 2, q 4
    assert logged["darling/classes_per_group"] == 3.0


@pytest.mark.parametrize("method", ["pass_at_k", "unlikeliness", "dqo"])
def test_a_real_trl_step_trains_on_the_methods_advantage(tmp_path, monkeypatch, method):
    """One GRPOTrainer step per method, with the judge and trainer class `trl.run` picks for
    it: TRL's logged advantages are the core's (one_trl_step asserts it), and the method got
    its input (unlikeliness: the policy's log-probabilities; DQO: the dice embeddings), or
    the core would have refused the step."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)

    def one_in_four(prompts, completions, **_):  # binary: 1 correct of each 4 (c=1, k=2)
        return [float(i % 4 == 0) for i in range(len(completions))]

    sections = {"task": {"kind": "digit_sum"}, "darling": METHODS[method]}
    rows = [{"prompt": "a b"}, {"prompt": "c d"}]
    _, reward, _ = one_trl_step(
        tmp_path,
        sections,
        rows,
        one_in_four,
        max_completion_length=8,
        word_vocabulary=["a", "b", "c", "d", "e"],
        judge=multiset_judge,
    )
    batch = reward.last_batch
    assert set(batch.quality.tolist()) <= {0.0, 1.0}
    assert np.abs(batch.advantage).sum() > 0  # a group that was not degenerate
    if method == "unlikeliness":  # mean token log-probabilities of the sampled completions
        logprobs = np.asarray(reward.last_logprobs)
        assert logprobs.shape == (8,) and np.all(logprobs < 0)
        for rows_ in (slice(0, 4), slice(4, 8)):
            want = unlikeliness_rewards(batch.quality[rows_], logprobs[rows_], 0.25)
            np.testing.assert_allclose(batch.reward[rows_], want)
    if method == "dqo":  # quality plus a log-det gain in (0, log 2]: not quality alone
        gain = batch.reward - batch.quality
        assert np.all((gain > 0) & (gain <= np.log(2) + 1e-12))


# ------------------------------------------------------------------------- refusals by key


def trl_config(task, darling, group_size=4):
    from darling_nemo.trl.run import validate_trl_config

    return validate_trl_config(
        {"engine": "trl", "task": task, "darling": darling, "trainer": {"group_size": group_size}}
    )


@pytest.mark.parametrize(
    ("task", "darling", "named"),
    [
        ({"kind": "chat", "data_path": "x.jsonl"}, {"method": "outcome"}, "darling.method=outcome"),
        ({"kind": "chat", "data_path": "x.jsonl"}, {"method": "pass_at_k"}, "binary rewards"),
        ({"kind": "digit_sum"}, {"method": "pass_at_k", "k": 5}, "darling.k=5 is more than"),
    ],
)
def test_a_method_the_task_cannot_serve_is_refused_by_key(task, darling, named):
    with pytest.raises(ConfigError, match=named):
        trl_config(task, darling)


def test_a_mini_arm_with_k_above_the_group_is_refused_by_arm():
    with pytest.raises(ConfigError, match=r"arms\.passk\.k=16 is more than trainer.group_size=8"):
        validate_section(
            MiniConfig,
            {
                "task": {"kind": "digit_sum"},
                "trainer": {"group_size": 8},
                "arms": {"grpo": {"enabled": False}, "passk": {"method": "pass_at_k", "k": 16}},
            },
        )


def test_the_newest_rivals_are_miniature_arms_and_refused_by_arm():
    arms = {
        "grpo": {"enabled": False},
        "unlikeliness": {"method": "unlikeliness"},
        "pkpo": {"method": "pkpo", "pkpo_k": 4},
        "dqo": {"method": "dqo"},  # the dice task's own embeddings
    }
    base = {"task": {"kind": "digit_sum"}, "trainer": {"group_size": 8}}
    mini = validate_section(MiniConfig, {**base, "arms": arms})
    assert [mini.arms[name].method for name in arms] == ["darling", *list(arms)[1:]]
    too_big = {**arms, "pkpo": {"method": "pkpo", "pkpo_k": 9}}
    with pytest.raises(ConfigError, match=r"arms\.pkpo\.pkpo_k=9 is more than trainer"):
        validate_section(MiniConfig, {**base, "arms": too_big})
    # outside the dice task DQO needs the embedding judge's embeddings
    with pytest.raises(ConfigError, match=r"needs response embeddings: set darling\.judge\.kind"):
        trl_config({"kind": "math", "data_path": "x.jsonl"}, {"method": "dqo"})


def test_math_outcome_runs_judge_final_answers_with_math_verify(tmp_path):
    from darling_nemo.judges.answers import MathAnswerJudge
    from darling_nemo.trl.tasks import build_task

    data = tmp_path / "math.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    cfg = trl_config({"kind": "math", "data_path": str(data)}, {"method": "outcome"})
    task = build_task(cfg)
    assert isinstance(task.judge, MathAnswerJudge)
    # "1/2" and "0.5" are one answer to math-verify; a response without one is its own class
    texts = ["so \\boxed{1/2}", "hence \\boxed{0.5}", "\\boxed{3}", "I do not know"]
    batch = darling_batch(texts, [1, 1, 0, 0], [0] * 4, task.judge, cfg.darling.settings())
    assert batch.class_ids.tolist() == [0, 0, 1, 2]
    # sympy compares distinct answer strings once each: 1/2~0.5, 1/2~3, 0.5~3 at most
    assert task.judge.stats["comparisons"] <= 3 and task.judge.stats["no_answer"] >= 2
    # the same answer written alike is one answer without any comparison
    assert task.judge([("x \\boxed{7}", "y \\boxed{7}")]) == [1.0]


# ------------------------------------------------------------------------- the miniature


def test_the_rivals_miniature_shares_everything_but_its_arms_with_the_dice_task():
    from helpers import REPO

    from darling_nemo.config import load_config

    dice = load_config(REPO / "conf" / "mini" / "dice.yaml")
    rivals = load_config(REPO / "conf" / "mini" / "rivals.yaml")
    shared = set(dice) - {"arms", "output_dir", "differences"}
    assert {k: rivals[k] for k in shared} == {k: dice[k] for k in shared}
    # the dice task's arms first, unchanged (GRPO stays the baseline of the differences)
    assert list(rivals["arms"])[:3] == list(dice["arms"])
    assert {k: rivals["arms"][k] for k in dice["arms"]} == dice["arms"]
    assert list(rivals["arms"])[3:] == ["pass_at_k", "outcome", "darling_gdpo"]
    assert rivals["output_dir"] != dice["output_dir"]  # the dice task's report stays its own


def test_differences_must_name_a_measured_metric():
    with pytest.raises(ConfigError, match=r"differences: \['pass@8'\] not measured"):
        validate_section(
            MiniConfig,
            {"task": {"kind": "digit_sum"}, "arms": {"a": {}}, "differences": ["pass@8"]},
        )


def test_the_rivals_miniature_end_to_end_at_toy_scale(tmp_path, capsys, monkeypatch):
    """`recipes/darling_mini.py --config conf/mini/rivals.yaml` at toy scale: every arm
    trains and is evaluated, one table, the paired differences to GRPO, the figures."""
    import importlib.util

    from helpers import REPO

    from darling_nemo.mini.reproducibility import PORTABLE_KERNELS

    for name in PORTABLE_KERNELS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = importlib.util.spec_from_file_location("mini", REPO / "recipes" / "darling_mini.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    result = recipe.main(
        [
            "--config",
            str(REPO / "conf" / "mini" / "rivals.yaml"),
            f"output_dir={tmp_path}",
            "seeds=[3]",
            "warm_start.steps=5",
            "trainer.max_steps=2",
            "evaluation.num_samples=4",
            "evaluation.pass_at_k=[1,4]",
            "differences=[pass@1,pass@4,distinct_correct,distinct_all]",
            "logging.report_to=[]",
            "logging.progress_bar=false",
        ]
    )
    arms = ["grpo", "darling", "grpo_no_std", "pass_at_k", "outcome", "darling_gdpo"]
    assert list(result["arms"]) == arms
    table = capsys.readouterr().out
    for arm in arms[1:]:
        assert f"| {arm} |" in table
        assert f"distinct_all: {arm} - grpo" in table
    for file in ("comparison.md", "curves.png", "pass_at_k.png"):
        assert (tmp_path / file).stat().st_size > 0


def test_the_cost_benchmark_times_every_method(capsys):
    from darling_nemo.bench.rivals import METHODS, main

    medians = main(["--prompts", "2", "--repeats", "1"])
    assert list(medians) == list(METHODS) and all(s >= 0 for s in medians.values())
    out = capsys.readouterr().out
    assert "2 prompts x 8 responses" in out and "| outcome (math-verify answers) |" in out


def test_completion_logprobs_match_one_unpadded_pass_per_row():
    """`mean_completion_logprobs` pads a batch of prompt + completion rows of different
    lengths into one forward pass; each row's mean must be what a pass over that row alone
    gives (log-softmax of logits / temperature at the completion's tokens), and 0 for an
    empty completion."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from darling_nemo.trl.logprobs import mean_completion_logprobs

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=11, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    )
    model.eval()
    prompts = [[1, 2], [3], [4, 5, 6], [7]]
    completions = [[3, 4, 5], [6], [], [8, 9, 10, 2]]
    got = mean_completion_logprobs(model, prompts, completions, temperature=0.7, pad_id=0)
    for p, c, value in zip(prompts, completions, got, strict=True):
        if not c:
            assert value == 0.0
            continue
        ids = torch.tensor([p + c])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].float() / 0.7
        logp = torch.log_softmax(logits, -1)
        want = sum(float(logp[len(p) - 1 + t, tok]) for t, tok in enumerate(c)) / len(c)
        assert value == pytest.approx(want, abs=1e-5)
