"""Prefix-cached pair scoring gives the full computation's P(similar) (issue 31): a tiny
causal classifier (Qwen3 shape, random weights, a real saved checkpoint), every pair of a
group scored from its whole input and again reusing the cached keys/values of `CLS a SEP`."""

from __future__ import annotations

import random

import numpy as np
import pytest

from darling_nemo.judges.cross_encoder import SequenceClassifier
from darling_nemo.judges.node_server import server_command
from darling_nemo.judges.prefix_cache import PrefixCache, is_causal_classifier, shared_prefix
from darling_nemo.judges.serve_flags import LAST_POOLING, caching_args
from darling_nemo.judges.templates import PairFormatter
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import ClassifierServersConfig, NodeServerConfig
from darling_nemo.serve_classifiers import server_commands

BLOCK = 4  # small blocks, so prefixes ending on and off a block boundary both occur

pytestmark = pytest.mark.usefixtures("offline")


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    path = save_tiny_classifier(
        tmp_path_factory.mktemp("qwen3"), "qwen3", max_positions=512, append_pad=True
    )
    return SequenceClassifier(str(path), "cpu", "float32")


def group(seed: int) -> list[str]:
    """8 responses: random ones, a repeat, two sharing a beginning, and one whose
    `CLS a SEP` prefix (1 + 10 + 1 tokens) ends exactly on a block boundary."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    shared = words(6)
    out = [words(rng.randint(3, 40)) for _ in range(4)]
    out += [out[0], f"{shared} {words(5)}", f"{shared} {words(9)}", words(10)]
    assert (1 + len(out[-1].split()) + 1) % BLOCK == 0
    return out


def pair_ids(classifier: SequenceClassifier, responses: list[str]) -> list[list[int]]:
    formatter = PairFormatter("qwen3_math", None, "words", classifier.tokenizer)
    n = len(responses)
    texts = [formatter.text(responses[i], responses[j]) for i in range(n) for j in range(i + 1, n)]
    return classifier.encode(texts)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_prefix_gives_the_full_inputs_p_similar(qwen3, seed):
    ids = pair_ids(qwen3, group(seed))
    full = qwen3.probs_from_ids(ids, batch_size=8)[:, -1]
    cache = PrefixCache(qwen3.model, block_tokens=BLOCK)
    cached = cache.probs(ids).numpy()[:, -1]
    assert np.abs(full - cached).max() < 1e-5
    assert full.std() > 1e-3  # the scores vary: equality is not that of constants
    # each first response's later pairs reuse at least its whole blocks of `CLS a SEP`
    stats = cache.stats()
    assert stats["prefix_cache_hit_inputs"] >= 28 - 7
    assert stats["prefix_cache_queries"] == sum(len(seq) for seq in ids)
    assert 0.3 < stats["prefix_cache_hits"] / stats["prefix_cache_queries"] < 0.5


def test_any_order_and_a_repeated_input_give_the_same_scores(qwen3):
    ids = pair_ids(qwen3, group(3))
    full = qwen3.probs_from_ids(ids, batch_size=8)[:, -1]
    order = list(range(len(ids)))
    random.Random(0).shuffle(order)
    order.append(order[0])  # the same input again: all but its last token reused
    cache = PrefixCache(qwen3.model, block_tokens=BLOCK)
    cached = cache.probs([ids[k] for k in order]).numpy()[:, -1]
    assert np.abs(full[order] - cached).max() < 1e-5


def test_a_small_cache_forgets_the_least_recently_used_inputs(qwen3):
    ids = pair_ids(qwen3, group(4))
    cache = PrefixCache(qwen3.model, block_tokens=BLOCK, capacity=2)
    cache.probs(ids[:5])
    assert len(cache.entries) == 2
    assert list(cache.entries)[-1] == tuple(ids[4])


def test_a_cache_hit_makes_an_input_recently_used(qwen3):
    # Pairs 0 and 1 share the first response `CLS a0 SEP`; pair 7 starts with a1. Cached in
    # the order 0, 7, pair 1 reuses pair 0's blocks: pair 0 is then the most recently used,
    # so the full cache of two forgets pair 7 (first in, first out would forget pair 0).
    ids = pair_ids(qwen3, group(4))
    cache = PrefixCache(qwen3.model, block_tokens=BLOCK, capacity=2)
    cache.probs([ids[0], ids[7]])
    _, hit = cache.logits_and_hit(ids[1])
    assert hit >= BLOCK and hit <= shared_prefix(ids[0], ids[1])
    assert list(cache.entries) == [tuple(ids[0]), tuple(ids[1])]


def test_an_encoder_is_not_cached(tmp_path):
    bert = SequenceClassifier(str(save_tiny_classifier(tmp_path, "bert")), "cpu", "float32")
    assert not is_causal_classifier(bert.model)
    with pytest.raises(ValueError, match="causal classifier"):
        PrefixCache(bert.model)


def test_causal_classifiers_are_served_with_last_pooling(tmp_path):
    math, chat = (
        "dogtooth/qwen3-4b-emb-finetuned-step-70-hf",
        "dogtooth/similarity-classifier-f168-hf",
    )
    assert caching_args(math, []) == LAST_POOLING
    assert caching_args(chat, []) == []  # ModernBERT: bidirectional, nothing to reuse
    # a pooler the user chose is theirs (the classify contract checks what it gives)
    assert caching_args(math, ["--override-pooler-config", '{"pooling_type":"MEAN"}']) == []
    local = save_tiny_classifier(tmp_path / "q", "qwen3")
    assert caching_args(str(local), []) == LAST_POOLING
    servers = ClassifierServersConfig(model=math, gpus=[0, 1])
    assert all(argv[-2:] == LAST_POOLING for _, argv in server_commands(servers))
    _, argv = server_command(NodeServerConfig(model=math, extra_args=["--x"]))
    assert argv[-3:] == [*LAST_POOLING, "--x"]
    _, argv = server_command(NodeServerConfig(model=chat))
    assert "--override-pooler-config" not in argv
