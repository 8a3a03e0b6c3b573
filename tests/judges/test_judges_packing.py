"""Sizing served-judge requests by tokens: the token count of each pair (counted with the
tokenizer, or estimated without one) and the greedy in-order packing of pairs into requests.
The served judge itself runs against real servers in tests/judges/test_classify_server.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.judges.served import pack_requests
from darling_nemo.judges.templates import PairFormatter
from darling_nemo.judges.tiny import WORDS, save_tiny_tokenizer
from darling_nemo.schema import ServedJudgeConfig


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    return save_tiny_tokenizer(tmp_path_factory.mktemp("bert"), "bert", model_max_length=128)


# ---------------------------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------------------------


def test_pack_requests_hand_cases():
    # budget 10, cap 3: 4 + 4 = 8 fits, + 4 = 12 does not -> [0, 2) then [2, 3)
    assert pack_requests([4, 4, 4], 10, 3) == [(0, 2), (2, 3)]
    # exactly at the budget is one request
    assert pack_requests([5, 5], 10, 64) == [(0, 2)]
    # a 25-token pair is over the budget: it goes alone; its neighbours pack around it
    assert pack_requests([3, 25, 3, 3], 10, 64) == [(0, 1), (1, 2), (2, 4)]
    assert pack_requests([25, 25], 10, 64) == [(0, 1), (1, 2)]
    # the pair cap binds before the budget: 5 one-token pairs, cap 2 -> 2 + 2 + 1
    assert pack_requests([1] * 5, 100, 2) == [(0, 2), (2, 4), (4, 5)]
    assert pack_requests([], 10, 64) == []


def test_default_budget_at_the_papers_math_scale():
    cfg = ServedJudgeConfig()
    # 4,096-token math pairs: 65,536 // 4,096 = 16 per request; 7,168 pairs -> 448 requests
    spans = pack_requests([4096] * 7168, cfg.tokens_per_request, cfg.pairs_per_request)
    assert len(spans) == 448 and {b - a for a, b in spans} == {16}
    # 200-token chat pairs: 327 fit the budget, the cap of 64 pairs binds
    spans = pack_requests([200] * 128, cfg.tokens_per_request, cfg.pairs_per_request)
    assert spans == [(0, 64), (64, 128)]


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(min_value=1, max_value=300), max_size=60),
    budget=st.integers(min_value=1, max_value=400),
    cap=st.integers(min_value=1, max_value=8),
)
def test_packing_keeps_order_and_respects_the_budget(tokens, budget, cap):
    spans = pack_requests(tokens, budget, cap)
    # concatenated, the requests are the original pairs in order, none empty
    assert [k for a, b in spans for k in range(a, b)] == list(range(len(tokens)))
    assert all(b > a for a, b in spans)
    for index, (a, b) in enumerate(spans):
        size = sum(tokens[a:b])
        assert b - a <= cap
        assert size <= budget or (b - a == 1 and tokens[a] > budget)  # over budget: alone
        if index + 1 < len(spans):  # greedy: the next pair did not fit (fewest requests)
            assert size + tokens[b] > budget or b - a == cap


# ---------------------------------------------------------------------------------------------
# Token counts
# ---------------------------------------------------------------------------------------------


def test_token_estimate_without_a_tokenizer():
    f = PairFormatter("modernbert", None, "words")
    texts, tokens = f.texts_and_tokens([("abcdef  gh", "abc"), ("abc", "abc")])
    assert texts == [f.text("abcdef  gh", "abc"), f.text("abc", "abc")]
    # "abcdef gh" (whitespace collapsed): 9 chars / 3 = 3; "abc": 1; + template CLS SEP SEP (3)
    # + 2 estimated tokenizer specials -> 3 + 1 + 3 + 2 = 9; then 1 + 1 + 5 = 7
    assert tokens == [9, 7]
    # 10 chars round up: ceil(10 / 3) = 4 -> 4 + 1 + 5 = 10
    assert f.texts_and_tokens([("abcdefghij", "abc")])[1] == [10]


def test_token_count_matches_the_servers_with_a_tokenizer(bert_tokenizer):
    f = PairFormatter("modernbert", None, "words", tokenizer=bert_tokenizer)
    (text,), (count,) = f.texts_and_tokens([("the cat sat", "a dog")])
    # [CLS] (tokenizer) [CLS] the cat sat [SEP] a dog [SEP] [SEP] (tokenizer): 3 + 2 + 3 + 2
    assert count == 10 == len(bert_tokenizer(text)["input_ids"])


@settings(max_examples=40, deadline=None)
@given(
    a=st.lists(st.sampled_from(WORDS), max_size=150),
    b=st.lists(st.sampled_from(WORDS), max_size=150),
    truncation=st.sampled_from(["words", "tokens"]),
)
def test_token_count_is_what_the_tokenizer_sees(bert_tokenizer, a, b, truncation):
    # every tiny-vocabulary word is one token, so the count is exact here
    f = PairFormatter("modernbert", None, truncation, bert_tokenizer)
    (text,), (count,) = f.texts_and_tokens([(" ".join(a), " ".join(b))])
    assert text == f.text(" ".join(a), " ".join(b))
    assert count == len(bert_tokenizer(text)["input_ids"])


def test_each_response_is_cut_once_per_call(monkeypatch):
    f = PairFormatter("modernbert", None, "words")
    seen = []
    cut_many = f.cut_many
    monkeypatch.setattr(f, "cut_many", lambda texts: seen.append(list(texts)) or cut_many(texts))
    group = ["r0 x", "r1 y", "r2 z", "r3 w"]
    pairs = [(group[i], group[j]) for i in range(4) for j in range(i + 1, 4)]
    texts, _ = f.texts_and_tokens(pairs)
    assert seen == [group]  # one batch of 4 cuts for 6 pairs (a group of n: n, not n(n-1))
    assert texts == [f.text(a, b) for a, b in pairs]
