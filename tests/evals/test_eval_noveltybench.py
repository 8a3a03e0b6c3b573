"""NoveltyBench: greedy partition (vs union-find), ratings, utility, and the recipe end to end
on a tiny random Llama, a tiny reward model and the shipped MiniLM embedding judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_recipe
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import partition_groups, short_answer_equivalent
from darling_nemo.evals.noveltybench import (
    describe_judge,
    greedy_partition_groups,
    novelty_scores,
    rating_from_reward,
    summarize_noveltybench,
)
from darling_nemo.evals.schema import (
    SKYWORK_GEMMA2_27B_THRESHOLDS,
    NoveltyBenchConfig,
)
from darling_nemo.schema import (
    ConfigError,
    CrossEncoderJudgeConfig,
    EmbeddingJudgeConfig,
    LexicalJudgeConfig,
    validate_section,
)

# Responses longer than 5 words, so the short-answer rule never decides them.
A = "the quick brown fox jumps over the lazy dog"
B = "a quick brown fox leaps over a sleeping dog"
C = "a fast brown fox leaps over a sleeping hound"
D = "completely unrelated text about the stock market today"


def table_judge(similar: set[frozenset[str]]):
    """P(similar) = 1 for the listed unordered pairs, else 0; records every call."""
    calls: list[list[tuple[str, str]]] = []

    def judge(pairs):
        calls.append(list(pairs))
        return [1.0 if frozenset((a, b)) in similar else 0.0 for a, b in pairs]

    judge.calls = calls
    return judge


def greedy_spec(responses, equivalent):
    """NoveltyBench's procedure written out sequentially: the specification."""
    partition = [-1] * len(responses)
    classes = 0
    for i in range(len(responses)):
        if partition[i] >= 0:
            continue
        partition[i] = classes
        for j in range(i + 1, len(responses)):
            if partition[j] == -1 and equivalent(responses[i], responses[j]):
                partition[j] = classes
        classes += 1
    return partition


# ----------------------------------------------------------------------------- partition


def test_greedy_and_union_find_differ_on_a_chain():
    # The judge says A~B and B~C but not A~C (not transitive).
    judge = table_judge({frozenset((A, B)), frozenset((B, C))})
    # Greedy: A opens class 0; B joins (A~B); C is compared with A only -> new class 1.
    assert greedy_partition_groups([[A, B, C]], judge, 0.5) == [[0, 0, 1]]
    # Union-find (training time): A-B and B-C edges -> one class.
    assert partition_groups([[A, B, C]], judge, 0.5)[0].class_ids == [0, 0, 0]


def test_greedy_compares_with_the_first_member_only():
    # A~C and B~C but A!~B. Greedy: A opens 0; B no; C joins 0 (via A). B opens 1.
    # C is never compared with B, so distinct = 2 where union-find finds 1.
    judge = table_judge({frozenset((A, C)), frozenset((B, C))})
    assert greedy_partition_groups([[A, B, C]], judge, 0.5) == [[0, 1, 0]]
    # Rounds: 1st (A,B),(A,C); 2nd B alone has no unassigned successor -> one judge call.
    assert judge.calls == [[(A, B), (A, C)]]
    assert partition_groups([[A, B, C]], judge, 0.5)[0].class_ids == [0, 0, 0]


def test_short_answer_rule_and_threshold():
    # "Paris" / "paris." / "It is Paris": rule applies (<= 5 words): 1 shared word of
    # "it is paris" (3 words): 2*1 >= 3 false -> distinct; "paris"/"Paris": equivalent.
    judge = table_judge(set())
    assert greedy_partition_groups([["Paris", "paris", "It is Paris", D]], judge, 0.5) == [
        [0, 0, 1, 2]
    ]
    assert short_answer_equivalent("Paris", "It is Paris") is False
    assert judge.calls == [[("Paris", D)], [("It is Paris", D)]]  # only undecided pairs
    # Strictly greater than the threshold: 0.102 itself is not similar.
    assert greedy_partition_groups([[A, B]], lambda p: [0.102] * len(p), 0.102) == [[0, 1]]
    assert greedy_partition_groups([[A, B]], lambda p: [0.1021] * len(p), 0.102) == [[0, 0]]


def test_without_a_judge_only_identical_long_texts_match():
    assert greedy_partition_groups([[A, B, A, D]], None, 0.5) == [[0, 1, 0, 2]]


def test_groups_are_batched_into_rounds():
    judge = table_judge({frozenset((A, B))})
    groups = [[A, B, C], [D, A], ["yes", "yes", "no"]]
    assert greedy_partition_groups(groups, judge, 0.5) == [[0, 0, 1], [0, 1], [0, 0, 1]]
    # Round 1: group 0 sends (A,B),(A,C); group 1 sends (D,A); group 2 is all lexical.
    assert judge.calls == [[(A, B), (A, C), (D, A)]]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_batched_greedy_equals_the_sequential_procedure(data):
    pool = [A, B, C, D, "yes", "no", "maybe so"]
    groups = data.draw(
        st.lists(st.lists(st.sampled_from(pool), min_size=1, max_size=8), min_size=1, max_size=4)
    )
    pairs = [frozenset((x, y)) for i, x in enumerate(pool) for y in pool[i + 1 :]]
    similar = set(data.draw(st.lists(st.sampled_from(pairs), max_size=10)))
    judge = table_judge(similar)

    def equivalent(x, y):
        rule = short_answer_equivalent(x, y)
        return rule if rule is not None else judge([(x, y)])[0] > 0.5

    expected = [greedy_spec(g, equivalent) for g in groups]
    assert greedy_partition_groups(groups, table_judge(similar), 0.5) == expected


# ----------------------------------------------------------------------------- ratings, utility


def test_rating_cut_offs():
    t = SKYWORK_GEMMA2_27B_THRESHOLDS
    assert rating_from_reward(-100.0, t) == 1
    assert rating_from_reward(-7.71875, t) == 1  # equal to the first cut-off: lower rating
    assert rating_from_reward(-7.7, t) == 2
    assert rating_from_reward(-5.25, t) == 6  # above -5.5 (5th), at most -5.0 (6th)
    assert rating_from_reward(-2.046875, t) == 9
    assert rating_from_reward(-2.0, t) == 10
    assert rating_from_reward(30.0, t) == 10


def test_utility_hand_case():
    # ratings 8, 8, 6, 9; classes 0, 0, 1, 0: repeats (2nd, 4th) score 0 -> [8, 0, 6, 0].
    # weights 0.8^i = 1, .8, .64, .512 (sum 2.952); sum w*s = 8 + 3.84 = 11.84.
    s = novelty_scores([8, 8, 6, 9], [0, 0, 1, 0], patience=0.8)
    assert s["generation_scores"] == [8, 0, 6, 0]
    assert s["utility"] == pytest.approx(11.84 / 2.952)
    assert s["distinct"] == 2
    assert s["quality"] == pytest.approx(31 / 4)  # mean of all ratings, repeats included
    # The DARLING fork: first rating of each class (8, 6) summed, over n = 4: 14 / 4 = 3.5.
    assert s["utility_darling"] == pytest.approx(3.5)
    # All distinct and all rated 10: utility 10 whatever the patience.
    assert novelty_scores([10] * 10, list(range(10)), 0.8)["utility"] == pytest.approx(10)
    # One class: only the first counts: 10 / sum(0.8^i, i<10) = 10 / 4.4631... = 2.2406...
    assert novelty_scores([10] * 10, [0] * 10, 0.8)["utility"] == pytest.approx(
        10 / sum(0.8**i for i in range(10))
    )
    # ... and for the DARLING fork 10 / 10 = 1; all distinct: (10 * 10) / 10 = 10.
    assert novelty_scores([10] * 10, [0] * 10, 0.8)["utility_darling"] == pytest.approx(1.0)
    assert novelty_scores([10] * 10, list(range(10)), 0.8)["utility_darling"] == 10
    # A late new class is not discounted: ratings 5, 5, 5, 7, classes 0, 0, 0, 1:
    # fork (5 + 7) / 4 = 3; NoveltyBench (5 + 0.512 * 7) / 2.952 = 8.584 / 2.952 = 2.9079.
    late = novelty_scores([5, 5, 5, 7], [0, 0, 0, 1], 0.8)
    assert late["utility_darling"] == pytest.approx(3.0)
    assert late["utility"] == pytest.approx(8.584 / 2.952)


def test_summary_reports_both_utilities_with_a_note():
    rows = [
        novelty_scores([8, 8, 6, 9], [0, 0, 1, 0], 0.8),  # utility_darling 3.5
        novelty_scores([5, 5, 5, 7], [0, 0, 0, 1], 0.8),  # utility_darling 3.0
    ]
    summary = summarize_noveltybench(rows, 2, {})
    assert summary["mean_utility_darling"] == pytest.approx(3.25)
    assert summary["var_utility_darling"] == pytest.approx(0.0625)  # (0.25^2 + 0.25^2) / 2
    assert summary["mean_utility"] == pytest.approx((11.84 + 8.584) / 2.952 / 2)
    assert "utility_darling" in summary["utility_note"]


def test_judge_is_flagged():
    ref = CrossEncoderJudgeConfig(
        model="yimingzhang/deberta-v3-large-generation-similarity", threshold=0.102
    )
    for mode, tokens in (("upstream", 128), ("darling", 512)):
        described = describe_judge(ref, "noveltybench", mode)
        assert described["is_reference"] is True and described["side_tokens"] == tokens
        assert f"cut to {tokens} tokens ({mode} mode)" in described["note"]
    stand_in = describe_judge(EmbeddingJudgeConfig(), "noveltybench", "upstream")
    assert stand_in["is_reference"] is False and "stand-in" in stand_in["note"]
    assert "MiniLM" in stand_in["description"] and "calibrated head" in stand_in["description"]
    assert stand_in["side_tokens"] is None  # the embedding judge reads no pair input
    lexical = describe_judge(LexicalJudgeConfig(), "noveltybench", "upstream")
    assert lexical["is_reference"] is False


def test_config_validation():
    base = {"output_dir": "o", "prompts": "p.jsonl", "generator": {"model": "m"}}
    cfg = validate_section(NoveltyBenchConfig, base)
    assert (cfg.sampling.n, cfg.sampling.temperature, cfg.patience) == (10, 1.0, 0.8)
    assert cfg.reward_model.thresholds == list(SKYWORK_GEMMA2_27B_THRESHOLDS)
    with pytest.raises(ConfigError, match=r"reward_model\.thresholds"):
        validate_section(NoveltyBenchConfig, {**base, "reward_model": {"thresholds": [1, 0]}})
    with pytest.raises(ConfigError, match="judge"):
        validate_section(NoveltyBenchConfig, {**base, "judge": {"kind": "deberta"}})
    # new evaluations run NoveltyBench as its leaderboard does; the paper's mode is one key
    # away; both with NoveltyBench's classifier at 0.102 and the tokenizer partition.py loads
    assert (cfg.mode, cfg.side_tokens) == ("upstream", 128)
    paper = validate_section(NoveltyBenchConfig, {**base, "mode": "darling"})
    assert (paper.mode, paper.side_tokens) == ("darling", 512)
    for c in (cfg, paper):
        assert (c.judge.kind, c.judge.model, c.judge.threshold) == (
            "cross_encoder",
            "yimingzhang/deberta-v3-large-generation-similarity",
            0.102,
        )
        assert c.pair_input == "noveltybench"
        assert c.pair_tokenizer_name() == "microsoft/deberta-v3-large"
    own = {**base, "judge": {"kind": "cross_encoder", "model": "/m/clf", "threshold": 0.102}}
    assert validate_section(NoveltyBenchConfig, own).pair_tokenizer_name() is None
    with pytest.raises(ConfigError, match=r"mode: 'leaderboard' is not one of upstream, darling"):
        validate_section(NoveltyBenchConfig, {**base, "mode": "leaderboard"})


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_noveltybench_recipe_end_to_end_and_resume(tiny_models, tmp_path, run_here):
    lm, rm = tiny_models
    out = tmp_path / "nb"
    # Cut-offs spread around the tiny reward model's scores (about 0 +- 0.2) so ratings vary.
    cuts = "[-0.2,-0.15,-0.1,-0.05,0.0,0.05,0.1,0.15,0.2]"
    args = [
        "--config",
        "conf/eval/noveltybench_tiny.yaml",
        f"generator.model={lm}",
        f"reward_model.model={rm}",
        f"output_dir={out}",
        f"+reward_model.thresholds={cuts}",
    ]
    # Stage by stage, as on a GPU node.
    first = run_recipe("eval_noveltybench.py", *args, "stage=generate")
    assert "now run stage=score" in first.stdout
    assert not (out / "scores.jsonl").exists()
    second = run_here("eval_noveltybench.py", *args, "stage=score")
    assert "stand-in" in second  # the MiniLM judge is not NoveltyBench's DeBERTa

    gens = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert [g["id"] for g in gens] == ["curated-0", "curated-1", "curated-2"]
    assert len(scores) == 3
    cut_values = json.loads(cuts)
    for r in scores:
        assert len(r["generations"]) == len(r["partition"]) == len(r["ratings"]) == 4
        # Recorded numbers agree with the definitions.
        assert r["ratings"] == [rating_from_reward(x, cut_values) for x in r["raw_rewards"]]
        again = novelty_scores(r["ratings"], r["partition"], 0.8)
        assert r["utility"] == pytest.approx(again["utility"])
        assert r["utility_darling"] == pytest.approx(again["utility_darling"])
        assert r["distinct"] == len(set(r["partition"]))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["prompts_done"] == 3 and summary["n"] == 4
    assert summary["mean_distinct"] == pytest.approx(sum(r["distinct"] for r in scores) / 3)
    assert summary["mean_utility_darling"] == pytest.approx(
        sum(r["utility_darling"] for r in scores) / 3
    )
    assert summary["judge"]["kind"] == "embedding" and not summary["judge"]["is_reference"]
    assert summary["reward_model"]["noveltybench_thresholds"] is False  # flagged: custom cuts

    # Resume: a lost scores line is recomputed identically; nothing is regenerated.
    lines = (out / "scores.jsonl").read_text().splitlines()
    (out / "scores.jsonl").write_text("\n".join(lines[:2]) + "\n")
    third = run_here("eval_noveltybench.py", *args)
    assert "3 of 3 prompts already generated" in third
    assert "2 of 3 prompts scored" in third
    assert json.loads((out / "scores.jsonl").read_text().splitlines()[2]) == scores[2]
    assert json.loads((out / "summary.json").read_text()) == summary


# ----------------------------------------------------------------------------- reference judge

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "quickly", "slowly", "big"]
WORDS += ["small", "red", "blue", "house", "tree"]


def tiny_deberta(folder: Path, with_tokenizer: bool = True, wordpiece: bool = False) -> Path:
    """A random 2-label DeBERTa-v2 pair classifier with segment embeddings (type_vocab_size
    2, so the segment ids change its output) and a word-level BERT tokenizer, or (wordpiece)
    the shipped MiniLM's BERT WordPiece tokenizer, which reads real text."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        AutoTokenizer,
        DebertaV2Config,
        DebertaV2ForSequenceClassification,
        PreTrainedTokenizerFast,
    )

    folder.mkdir(parents=True, exist_ok=True)
    if wordpiece:
        from darling_nemo.judges.embedding import shipped_minilm_path

        tokenizer = AutoTokenizer.from_pretrained(shipped_minilm_path())
    else:
        names = ["pad_token", "unk_token", "cls_token", "sep_token", "mask_token"]
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        backend = Tokenizer(
            models.WordLevel({w: i for i, w in enumerate([*specials, *WORDS])}, unk_token="[UNK]")
        )
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=backend,
            **dict(zip(names, specials, strict=True)),
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        )
    torch.manual_seed(0)
    config = DebertaV2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        type_vocab_size=2,
        relative_attention=True,
        position_biased_input=False,
        pos_att_type=["p2c", "c2p"],
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
        initializer_range=0.5,  # large random weights: outputs that depend on the input
    )
    DebertaV2ForSequenceClassification(config).save_pretrained(folder)
    if with_tokenizer:
        tokenizer.save_pretrained(folder)
    return folder


def partition_py_score(model_dir: Path, a: str, b: str, side_tokens: int = 512) -> float:
    """NoveltyBench's classifier_score (src/partition.py: max_length=128 upstream, 512 in the
    DARLING fork's evals/novelty-bench), written out: one pair, no padding,
    P = softmax(logits)[0, 1]."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    ids = [tokenizer.cls_token_id]
    for s in (a, b):
        ids += tokenizer.encode(
            s, truncation=True, max_length=side_tokens, add_special_tokens=False
        )
        ids.append(tokenizer.sep_token_id)
    first = ids.index(tokenizer.sep_token_id) + 1
    types = [0] * first + [1] * (len(ids) - first)
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([ids]),
            token_type_ids=torch.tensor([types]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        ).logits
    return float(logits.softmax(-1)[0, 1])


def nb_config(tmp_path: Path, model_dir: Path, **extra) -> NoveltyBenchConfig:
    return NoveltyBenchConfig(
        output_dir=str(tmp_path / "nb"),
        prompts=str(tmp_path / "prompts.jsonl"),
        generator={"model": "m"},
        judge={"kind": "cross_encoder", "model": str(model_dir), "threshold": 0.102},
        **extra,
    )


PAIRS = [
    ("the cat sat", "a dog ran"),
    ("the big red house on the mat", "a small blue tree"),
    ("cat", "the cat sat on the mat quickly and slowly"),
]


def test_reference_pair_input_is_partition_pys(tmp_path):
    from darling_nemo.evals.noveltybench import NoveltyBenchPairJudge, make_noveltybench_judge

    model_dir = tiny_deberta(tmp_path / "clf")
    judge = make_noveltybench_judge(nb_config(tmp_path, model_dir, mode="darling"))
    assert isinstance(judge, NoveltyBenchPairJudge)
    vocab = judge.tokenizer.get_vocab()
    # [CLS]=2 the cat sat [SEP]=3 a dog ran [SEP]; segment 0 through the first [SEP].
    enc = judge.encode("the cat sat", "a dog ran")
    ids = [
        2,
        vocab["the"],
        vocab["cat"],
        vocab["sat"],
        3,
        vocab["a"],
        vocab["dog"],
        vocab["ran"],
        3,
    ]
    assert enc == {"input_ids": ids, "token_type_ids": [0, 0, 0, 0, 0, 1, 1, 1, 1]}
    # darling mode: each side cut to its first 512 tokens: 1 + 512 + 1 + 512 + 1 = 1027 ids,
    # 514 in segment 0.
    long = judge.encode("cat " * 600, "dog " * 700)
    assert len(long["input_ids"]) == 1027 and long["token_type_ids"].count(0) == 514
    assert long["input_ids"][513:516] == [3, vocab["dog"], vocab["dog"]]
    # upstream mode (the default): 128 per side: 1 + 128 + 1 + 128 + 1 = 259 ids, 130 in 0.
    upstream = make_noveltybench_judge(nb_config(tmp_path, model_dir))
    short = upstream.encode("cat " * 600, "dog " * 700)
    assert len(short["input_ids"]) == 259 and short["token_type_ids"].count(0) == 130
    assert short["input_ids"][129:132] == [3, vocab["dog"], vocab["dog"]]
    assert short["input_ids"] == [*long["input_ids"][:129], 3, *long["input_ids"][514:642], 3]

    # Batched with padding (batch_size 32: all three pairs, lengths 9, 11, 13) = one by one.
    expected = [partition_py_score(model_dir, a, b) for a, b in PAIRS]
    assert judge(PAIRS) == pytest.approx(expected, abs=1e-5)
    # The text-template path (pair_input=judge_template) feeds other ids: other scores.
    from darling_nemo.judges import make_judge

    template = make_judge(nb_config(tmp_path, model_dir).judge)
    assert max(abs(x - y) for x, y in zip(template(PAIRS), expected, strict=True)) > 1e-4


def test_reference_judge_needs_a_tokenizer(tmp_path):
    from darling_nemo.evals.noveltybench import make_noveltybench_judge

    bare = tiny_deberta(tmp_path / "bare", with_tokenizer=False)  # as the hub checkpoint
    with pytest.raises(ConfigError, match=r"has \d+ tokens but .* 21.*pair_tokenizer=microsoft/"):
        make_noveltybench_judge(nb_config(tmp_path, bare))
    tokenizer_dir = tiny_deberta(tmp_path / "tok")
    judge = make_noveltybench_judge(nb_config(tmp_path, bare, pair_tokenizer=str(tokenizer_dir)))
    assert judge(PAIRS[:1]) == pytest.approx([partition_py_score(tokenizer_dir, *PAIRS[0])])


def test_reference_flag_needs_the_reference_input():
    ref = CrossEncoderJudgeConfig(model="/models/deberta-v3-large-generation-similarity")
    ref = ref.model_copy(update={"threshold": 0.102})
    local = describe_judge(ref, "noveltybench", "upstream")
    assert local["is_reference"] is True  # a local copy counts
    assert "segment ids" in local["note"]
    template = describe_judge(ref, "judge_template", "upstream")
    assert template["is_reference"] is False and "text template" in template["note"]
    assert template["side_tokens"] is None  # the template's own budget applies
    other = ref.model_copy(update={"threshold": 0.5})
    assert describe_judge(other, "noveltybench", "darling")["is_reference"] is False


@pytest.mark.slow
def test_score_stage_with_the_reference_encoding(tiny_models, tmp_path):
    from darling_nemo.evals.noveltybench import run_noveltybench

    _, rm = tiny_models
    model_dir = tiny_deberta(tmp_path / "deberta-v3-large-generation-similarity")
    (tmp_path / "prompts.jsonl").write_text('{"id": "p0", "prompt": "write"}\n')
    gens = [a for a, _ in PAIRS] + ["the cat sat"]  # n = 4; the repeat is an exact copy
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb/generations.jsonl").write_text(
        json.dumps({"id": "p0", "prompt": "write", "generations": gens}) + "\n"
    )
    reward = {"model": str(rm), "dtype": "float32", "device_map": None, "max_length": 64}
    cfg = nb_config(tmp_path, model_dir, stage="score", reward_model=reward)
    summary = run_noveltybench(cfg)
    assert summary["judge"]["is_reference"] and summary["judge"]["pair_input"] == "noveltybench"
    (record,) = [json.loads(x) for x in (tmp_path / "nb/scores.jsonl").read_text().splitlines()]

    # The greedy partition with partition.py's score decides every long pair.
    def equivalent(a, b):
        rule = short_answer_equivalent(a, b)
        return rule if rule is not None else partition_py_score(model_dir, a, b) > 0.102

    assert record["partition"] == greedy_spec(gens, equivalent)
    # Switching to the text template on the same output_dir is refused, not mixed.
    switched = nb_config(
        tmp_path, model_dir, stage="score", reward_model=reward, pair_input="judge_template"
    )
    with pytest.raises(ConfigError, match=r"pair_input: 'noveltybench' -> 'judge_template'"):
        run_noveltybench(switched)


# ----------------------------------------------------------------------------- modes


def same_opening_pair(tokenizer) -> tuple[str, str, str]:
    """(a, b, c) built from shipped responses: a, a long one; b, a's text through its first
    ~150 tokens, then another shipped response; c, a third one. a and b agree on their
    first 128 tokens and differ within their first 512."""
    from darling_nemo.resources import resource_path

    rows = [json.loads(x) for x in resource_path("noveltybench_similarity_train.jsonl").open()]
    texts = [r["generation_0"] for r in rows]
    a = next(t for t in texts if len(tokenizer.encode(t, add_special_tokens=False)) > 400)
    offsets = tokenizer(a, add_special_tokens=False, return_offsets_mapping=True)
    cut = offsets["offset_mapping"][150][1]
    b = a[:cut] + " " + next(t for t in texts if t != a)
    c = next(t for t in texts[1:] if t not in (a, b) and len(t.split()) > 50)
    ids_a = tokenizer.encode(a, add_special_tokens=False)
    ids_b = tokenizer.encode(b, add_special_tokens=False)
    assert ids_a[:128] == ids_b[:128] and ids_a[:512] != ids_b[:512]
    return a, b, c


@pytest.fixture(scope="module")
def wordpiece_deberta(tmp_path_factory):
    return tiny_deberta(tmp_path_factory.mktemp("clf"), wordpiece=True)


def test_the_mode_changes_a_verdict_on_shipped_responses(tmp_path, wordpiece_deberta):
    from darling_nemo.evals.noveltybench import make_noveltybench_judge

    upstream = make_noveltybench_judge(nb_config(tmp_path, wordpiece_deberta))
    darling = make_noveltybench_judge(nb_config(tmp_path, wordpiece_deberta, mode="darling"))
    a, b, _ = same_opening_pair(upstream.tokenizer)
    # upstream (128 tokens a side) sees a and b as one text: the pair scores as (a, a)
    (up,) = upstream([(a, b)])
    assert up == pytest.approx(upstream([(a, a)])[0], abs=1e-6)
    assert up == pytest.approx(partition_py_score(wordpiece_deberta, a, b, 128), abs=1e-5)
    # the DARLING fork (512 a side) sees where they part
    (fork,) = darling([(a, b)])
    assert fork == pytest.approx(partition_py_score(wordpiece_deberta, a, b, 512), abs=1e-5)
    assert abs(up - fork) > 1e-3
    # so a threshold between the two scores is a verdict that flips with the mode: one
    # class of two responses upstream, two classes in the DARLING fork (or the reverse)
    threshold = (up + fork) / 2
    same_upstream = up > threshold
    assert greedy_partition_groups([[a, b]], upstream, threshold) == [
        [0, 0] if same_upstream else [0, 1]
    ]
    assert greedy_partition_groups([[a, b]], darling, threshold) == [
        [0, 1] if same_upstream else [0, 0]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["upstream", "darling"])
def test_score_stage_in_each_mode(tiny_models, tmp_path, wordpiece_deberta, mode):
    from transformers import AutoTokenizer

    from darling_nemo.evals.noveltybench import run_noveltybench

    _, rm = tiny_models
    a, b, c = same_opening_pair(AutoTokenizer.from_pretrained(wordpiece_deberta))
    threshold = (
        partition_py_score(wordpiece_deberta, a, b, 128)
        + partition_py_score(wordpiece_deberta, a, b, 512)
    ) / 2
    gens = [a, c, b, a]  # b is compared with a (its class's first member), never with c
    (tmp_path / "prompts.jsonl").write_text('{"id": "p0", "prompt": "write"}\n')
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb/generations.jsonl").write_text(
        json.dumps({"id": "p0", "prompt": "write", "generations": gens}) + "\n"
    )
    reward = {"model": str(rm), "dtype": "float32", "device_map": None, "max_length": 64}
    cfg = nb_config(tmp_path, wordpiece_deberta, stage="score", reward_model=reward, mode=mode)
    cfg = cfg.model_copy(update={"judge": cfg.judge.model_copy(update={"threshold": threshold})})
    summary = run_noveltybench(cfg)
    tokens = {"upstream": 128, "darling": 512}[mode]
    assert summary["mode"] == mode and mode in summary["mode_note"]
    assert summary["judge"]["side_tokens"] == tokens
    (record,) = [json.loads(x) for x in (tmp_path / "nb/scores.jsonl").read_text().splitlines()]

    def equivalent(x, y):
        rule = short_answer_equivalent(x, y)
        if rule is not None:
            return rule
        return partition_py_score(wordpiece_deberta, x, y, tokens) > threshold

    # NoveltyBench's greedy partition, against each class's first member, in either mode
    assert record["partition"] == greedy_spec(gens, equivalent)
    flipped = partition_py_score(wordpiece_deberta, a, b, 128) > threshold
    joined = record["partition"][2] == record["partition"][0]
    assert joined == (flipped if mode == "upstream" else not flipped)
    # the other mode's truncation on the same output_dir is refused, not mixed
    other = "darling" if mode == "upstream" else "upstream"
    switched = cfg.model_copy(update={"mode": other})
    with pytest.raises(ConfigError, match=rf"side_tokens: {tokens} -> "):
        run_noveltybench(switched)
