"""The three newest rivals (darling_nemo/methods/: unlikeliness.py, pkpo.py, dqo.py).

Hand-worked groups with the arithmetic in comments (exact fractions where the formula is
rational), properties checked against each formula's definition computed independently
here (PKPO: enumerate every k-subset; DQO: two determinants), and the one-line refusals
where a method's input is missing.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import darling_batch
from darling_nemo.methods.dqo import determinant_gains
from darling_nemo.methods.pkpo import pkpo_rewards
from darling_nemo.methods.unlikeliness import likelihood_ranks, unlikeliness_rewards
from darling_nemo.schema import validate_darling

# ------------------------------------------------------------------------- unlikeliness


def test_unlikeliness_by_hand():
    # log-probs ascending: row 1 (-3.0) rank 0, row 3 (-2.0) rank 1, row 0 (-1.0) rank 2,
    # row 2 (-0.5) rank 3. n = 4, penalty 1/4: r = q (1 - rank/16).
    # row 0: 1 - 2/16 = 7/8; row 1: 1; row 2: incorrect, 0; row 3: 1 - 1/16 = 15/16.
    logprobs = [-1.0, -3.0, -0.5, -2.0]
    assert likelihood_ranks(logprobs).tolist() == [2, 0, 3, 1]
    got = unlikeliness_rewards([1, 1, 0, 1], logprobs, 0.25)
    np.testing.assert_array_equal(got, [7 / 8, 1.0, 0.0, 15 / 16])
    # through the core: the reward is the method's, the advantage its group-mean centring
    s = validate_darling({"method": "unlikeliness"}).settings()
    batch = darling_batch(list("abcd"), [1, 1, 0, 1], [0] * 4, None, s, logprobs=logprobs)
    np.testing.assert_array_equal(batch.reward, [7 / 8, 1.0, 0.0, 15 / 16])
    mean = (7 / 8 + 1 + 15 / 16) / 4
    np.testing.assert_allclose(batch.advantage, batch.reward - mean)


def test_unlikeliness_ties_keep_response_order_and_groups_rank_apart():
    # two groups of 2, all log-probs equal: ranks 0, 1 in each group (row order); all
    # correct, so ranked only with unlikeliness_drop_uniform off
    s = validate_darling(
        {"method": "unlikeliness", "unlikeliness_penalty": 1.0, "unlikeliness_drop_uniform": False}
    ).settings()
    batch = darling_batch(list("abcd"), [1] * 4, [0, 1, 0, 1], None, s, logprobs=[-1.0] * 4)
    # group 0 = rows 0, 2 -> ranks 0, 1 -> 1, 1/2; group 1 = rows 1, 3 likewise
    np.testing.assert_array_equal(batch.reward, [1.0, 1.0, 0.5, 0.5])


def test_unlikeliness_drops_a_group_whose_rewards_are_all_equal_by_default():
    # the authors' advantage_threshold: group 0 (rows 0, 1) all correct, group 1 (rows 2, 3)
    # mixed. Group 0 keeps 1, 1 (advantage 0); group 1 is ranked: row 2 (-2.0) rank 0 keeps
    # 1, row 3 is wrong: 0. Advantages: group 0 0, 0; group 1 +1/2, -1/2.
    s = validate_darling({"method": "unlikeliness"}).settings()
    assert s.keys["unlikeliness_drop_uniform"] is True
    logprobs = [-1.0, -3.0, -2.0, -0.5]
    batch = darling_batch(list("abcd"), [1, 1, 1, 0], [0, 0, 1, 1], None, s, logprobs=logprobs)
    np.testing.assert_array_equal(batch.reward, [1.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(batch.advantage, [0.0, 0.0, 0.5, -0.5])
    # off: the all-correct group is ranked by likelihood alone (row 1 rank 0, row 0 rank 1:
    # 1 and 1 - 1/8), so its likelier answer is pushed down
    off = validate_darling({"method": "unlikeliness", "unlikeliness_drop_uniform": False})
    batch = darling_batch(
        list("abcd"), [1, 1, 1, 0], [0, 0, 1, 1], None, off.settings(), logprobs=logprobs
    )
    np.testing.assert_array_equal(batch.reward[:2], [7 / 8, 1.0])
    # all wrong: nothing either way
    assert unlikeliness_rewards([0, 0], [-1.0, -2.0], 0.25, drop_uniform=True).tolist() == [0, 0]


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.booleans(), st.floats(-50, 0, allow_nan=False)), min_size=1, max_size=10),
    st.floats(0, 1),
)
def test_unlikeliness_rewards_the_less_likely_correct_response_more(rows, penalty):
    correct = np.array([c for c, _ in rows], dtype=float)
    logprobs = np.array([lp for _, lp in rows])
    got = unlikeliness_rewards(correct, logprobs, penalty)
    assert np.all(got[correct == 0] == 0)  # an incorrect response stays at 0
    assert np.all((got <= correct) & (got >= correct * (1 - penalty)))
    for i, j in itertools.permutations(np.flatnonzero(correct), 2):
        if logprobs[i] < logprobs[j]:  # i less likely: at least j's reward
            assert got[i] >= got[j]


def test_unlikeliness_without_logprobs_is_refused_in_one_line():
    s = validate_darling({"method": "unlikeliness"}).settings()
    with pytest.raises(ValueError) as err:
        darling_batch(["a", "b"], [1.0, 0.0], [0, 0], None, s)
    assert "\n" not in str(err.value)
    assert "darling.method=unlikeliness" in str(err.value) and "(logprobs)" in str(err.value)
    with pytest.raises(ValueError, match="1 logprobs for 2 responses"):
        darling_batch(["a", "b"], [1.0, 0.0], [0, 0], None, s, logprobs=[-1.0])
    with pytest.raises(ValueError, match=r"logprobs\[1\] is nan"):
        darling_batch(["a", "b"], [1.0, 0.0], [0, 0], None, s, logprobs=[-1.0, float("nan")])


# ------------------------------------------------------------------------- PKPO


def test_pkpo_binary_by_hand_both_baselines():
    # n = 4, c = 2, k = 2. No baseline: correct k/n = 1/2; incorrect (k/n) rho(3, 2, 1)
    # = 1/2 (1 - C(1,1)/C(3,1)) = 1/2 * 2/3 = 1/3.
    # loo_minus_one: correct C(n-c, k-1)/C(n, k) = C(2,1)/C(4,2) = 2/6 = 1/3; incorrect 0.
    np.testing.assert_allclose(pkpo_rewards([1, 0, 0, 1], 2, "none"), [1 / 2, 1 / 3, 1 / 3, 1 / 2])
    np.testing.assert_allclose(pkpo_rewards([1, 0, 0, 1], 2, "loo_minus_one"), [1 / 3, 0, 0, 1 / 3])


def test_pkpo_graded_by_hand():
    # g = 0.2, 0.5, 0.9; k = 2: pairs {0,1} max 0.5, {0,2} max 0.9, {1,2} max 0.9; C(3,2) = 3.
    # s_0 = (0.5 + 0.9)/3, s_1 = (0.5 + 0.9)/3, s_2 = (0.9 + 0.9)/3.
    # loo_minus_one removes i from its pairs: b_0 = (0.5 + 0.9)/3, b_1 = (0.2 + 0.9)/3,
    # b_2 = (0.2 + 0.5)/3 -> 0, 0.3/3, 1.1/3.
    g = [0.2, 0.5, 0.9]
    np.testing.assert_allclose(pkpo_rewards(g, 2, "none"), [1.4 / 3, 1.4 / 3, 1.8 / 3])
    np.testing.assert_allclose(pkpo_rewards(g, 2, "loo_minus_one"), [0.0, 0.1, 1.1 / 3], atol=1e-12)
    # through the core, baseline mean on top
    s = validate_darling({"method": "pkpo", "pkpo_k": 2, "pkpo_baseline": "none"}).settings()
    batch = darling_batch(list("abc"), g, [0] * 3, None, s)
    np.testing.assert_allclose(batch.reward, [1.4 / 3, 1.4 / 3, 0.6])
    np.testing.assert_allclose(batch.advantage, batch.reward - 4.6 / 9)


def _by_enumeration(g: list[float], k: int, baseline: str) -> list[Fraction]:
    """The definition: average over every k-subset holding i of its max (minus, for
    loo_minus_one, the max of the subset without i), with exact fractions."""
    n = len(g)
    values = [Fraction(v) for v in g]
    out = []
    for i in range(n):
        total = Fraction(0)
        for subset in itertools.combinations(range(n), k):
            if i not in subset:
                continue
            total += max(values[j] for j in subset)
            if baseline == "loo_minus_one" and k > 1:
                total -= max(values[j] for j in subset if j != i)
        out.append(total / comb(n, k))
    return out


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(-4, 4), min_size=1, max_size=7),
    st.data(),
    st.sampled_from(["none", "loo_minus_one"]),
)
def test_pkpo_equals_the_subset_definition(values, data, baseline):
    g = [v / 4 for v in values]  # quarters: exact in floats, ties common
    k = data.draw(st.integers(1, len(g)))
    want = [float(x) for x in _by_enumeration(g, k, baseline)]
    np.testing.assert_allclose(pkpo_rewards(g, k, baseline), want, atol=1e-12)


@settings(max_examples=60)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.data())
def test_pkpo_binary_is_the_papers_closed_form(correct, data):
    n, c = len(correct), sum(correct)
    k = data.draw(st.integers(1, n))
    # rho(n-1, c, k-1), needed only where a response is incorrect (so c <= n - 1)
    rho = 1 - Fraction(comb(n - 1 - c, k - 1), comb(n - 1, k - 1)) if c < n else None
    want = [Fraction(k, n) if x else Fraction(k, n) * rho for x in correct]
    got = pkpo_rewards([float(x) for x in correct], k, "none")
    np.testing.assert_allclose(got, [float(w) for w in want], atol=1e-12)


def test_pkpo_refuses_k_above_the_group_and_an_unknown_baseline():
    s = validate_darling({"method": "pkpo", "pkpo_k": 3}).settings()
    with pytest.raises(ValueError, match=r"darling\.pkpo_k=3 but a group has 2 responses"):
        darling_batch(["a", "b"], [1.0, 0.0], [0, 0], None, s)
    with pytest.raises(Exception, match="pkpo_baseline='loo' is not one of none, loo_minus_one"):
        validate_darling({"method": "pkpo", "pkpo_baseline": "loo"})


# ------------------------------------------------------------------------- DQO


class _TableEmbedder:
    """A judge with embeddings: one fixed unit vector per text (and no pair verdicts)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def __call__(self, pairs):
        return [0.0 for _ in pairs]

    def embed(self, texts):
        return {t: np.asarray(self.table[t], dtype=float) for t in texts}


def test_dqo_by_hand():
    # e = (1,0), (1,0), (0,1), ridge 1: L = [[2,1,0],[1,2,0],[0,0,2]], det L = 3 * 2 = 6.
    # Without row 0 (or 1): [[2,0],[0,2]], det 4 -> d = log(6/4) = log 1.5.
    # Without row 2: [[2,1],[1,2]], det 3 -> d = log(6/3) = log 2. The duplicate adds less.
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(determinant_gains(e, 1.0), np.log([1.5, 1.5, 2.0]))
    judge = _TableEmbedder({"x": [1, 0], "y": [0, 1]})
    s = validate_darling({"method": "dqo", "dqo_weight": 0.5}).settings()
    batch = darling_batch(["x", "x", "y"], [1.0, 0.0, 1.0], [0] * 3, judge, s)
    np.testing.assert_allclose(
        batch.reward, [1 + 0.5 * np.log(1.5), 0.5 * np.log(1.5), 1 + 0.5 * np.log(2)]
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.floats(0.05, 3), st.integers(0, 2**16))
def test_dqo_is_the_log_determinant_difference(n, dim, ridge, seed):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, dim))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    kernel = e @ e.T + ridge * np.eye(n)
    full = np.linalg.slogdet(kernel)[1]
    want = [full - np.linalg.slogdet(np.delete(np.delete(kernel, i, 0), i, 1))[1] for i in range(n)]
    np.testing.assert_allclose(determinant_gains(e, ridge), want, atol=1e-9)


def test_dqo_without_embeddings_is_refused_in_one_line():
    s = validate_darling({"method": "dqo"}).settings()
    lexical = lambda pairs: [0.0 for _ in pairs]  # noqa: E731  a judge with no `embed`
    for judge in (None, lexical):
        with pytest.raises(ValueError) as err:
            darling_batch(["a", "b"], [1.0, 0.0], [0, 0], judge, s)
        assert "\n" not in str(err.value)
        assert "darling.method=dqo needs response embeddings" in str(err.value)
        assert "kind embedding" in str(err.value)


# ------------------------------------------------------------------------- refusals, darling-score


def test_dqo_refuses_a_pair_classifier_by_key():
    with pytest.raises(Exception, match=r"judge\.kind=cross_encoder gives none"):
        validate_darling({"method": "dqo", "judge": {"kind": "cross_encoder"}})
    validate_darling({"method": "dqo", "judge": {"kind": "embedding"}})  # accepted


def test_darling_score_lists_the_methods_and_takes_logprobs(tmp_path, capsys):
    from darling_nemo.score import main

    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "pass_at_k, outcome, unlikeliness, pkpo, dqo" in shown
    path = tmp_path / "g.jsonl"
    path.write_text('{"responses": ["a", "b", "c", "d"], "quality": [1, 1, 0, 1]}\n')
    # refused in one line naming the file, the line and the field, exit 2
    assert main([str(path), "--set", "method=unlikeliness"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{path}:1: method unlikeliness needs `logprobs`" in err
    path.write_text(
        '{"responses": ["a", "b", "c", "d"], "quality": [1, 1, 0, 1], '
        '"logprobs": [-1.0, -3.0, -0.5, -2.0]}\n'
    )
    out = tmp_path / "scored.jsonl"
    assert main([str(path), "--set", "method=unlikeliness", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["reward"] == [7 / 8, 1.0, 0.0, 15 / 16]
