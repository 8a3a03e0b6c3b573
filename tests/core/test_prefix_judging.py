"""Prefix-complete judging (judge_stream.add_partial, settled_words, usable_verdicts): a
response whose judged words are fixed joins its group before it finishes, and the classes,
rewards and advantages stay the synchronous ones bit for bit, whatever the partial outputs
were (a last word still growing, a multi-byte character split at the boundary, a stop string
cut off at the end) and whatever order they arrived in."""

from __future__ import annotations

import threading
import time
import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import darling_batch
from darling_nemo.judge_stream import (
    JudgeStream,
    first_words,
    settled_words,
    usable_verdicts,
)
from darling_nemo.schema import validate_darling

K = 4  # words the judge reads of each response (the reference's (MAX_LEN - 3) // 2)
SPACES = [" ", "\n", "\t", "  ", "\u3000"]  # U+3000: a whitespace character of 3 UTF-8 bytes
word = st.text(alphabet="abé漢", min_size=1, max_size=3)


@st.composite
def texts(draw: st.DrawFn, max_words: int = 8) -> str:
    words = draw(st.lists(word, min_size=0, max_size=max_words))
    gaps = draw(st.lists(st.sampled_from(SPACES), min_size=len(words), max_size=len(words)))
    lead = draw(st.sampled_from(["", " "]))
    return lead + "".join(w + g for w, g in zip(words, gaps, strict=True)).rstrip(
        draw(st.sampled_from(["", " \n\t\u3000"]))
    )


class PrefixJudge:
    """A deterministic, arbitrary judge of the first K words (like a served classifier with
    word truncation); records what it is sent."""

    prefix_words = K

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.sent: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, pairs):
        with self.lock:
            self.sent.extend(pairs)
        return [
            zlib.crc32(f"{self.seed}|{first_words(a, K)}|{first_words(b, K)}".encode())
            % 1000
            / 1000
            for a, b in pairs
        ]


# Worked example (K = 4): "one two three four" has 4 words but its last may still grow
# ("fourteen"); one more space fixes it; five words fix the first four whatever comes next.
def test_settled_words_by_hand():
    assert settled_words("one two three four", K) is None
    assert settled_words("one two three four ", K) == "one two three four"
    assert settled_words("one  two\nthree four five", K) == "one two three four"
    assert settled_words("one two thr", K) is None
    assert settled_words("", K) is None


@settings(max_examples=3000, deadline=None)
@given(final=texts(), cut=st.integers(0, 60))
def test_a_settled_prefix_is_the_final_responses_prefix(final, cut):
    """Whatever the final response, any text it begins with that settles gives its words."""
    partial = final[:cut]
    settled = settled_words(partial, K)
    if settled is not None:
        assert settled == first_words(final, K)


@st.composite
def partial_of(draw: st.DrawFn, final: str) -> str:
    """What a generation worker may report of `final` before it finishes: a prefix; a prefix
    whose last character is still undecoded (U+FFFD, a multi-byte character split at the
    boundary); the final text plus the start of a stop string that is then cut off; or a
    text the final response does not begin with (its first word decoded differently)."""
    cut = draw(st.integers(0, len(final)))
    kind = draw(st.sampled_from(["prefix", "split", "stop", "redecoded"]))
    if kind == "split":
        return final[: max(cut - 1, 0)] + "\ufffd"
    if kind == "stop":
        return final + draw(st.sampled_from([" </s", "\nSTOP", " x"]))
    if kind == "redecoded":
        return "x" + final + " y y y y y"
    return final[:cut]


@st.composite
def rollouts(draw: st.DrawFn):
    groups = draw(st.lists(st.lists(texts(), min_size=2, max_size=6), min_size=1, max_size=3))
    responses = [r for g in groups for r in g]
    prompts = [k for k, g in enumerate(groups) for _ in g]
    events = []  # (row, text, finished), each row's partials before its final
    for row, final in enumerate(responses):
        partials = draw(st.lists(partial_of(final), max_size=2))
        events.append([(row, p, False) for p in partials] + [(row, final, True)])
    order = []
    while any(events):
        queue = draw(st.sampled_from([q for q in events if q]))
        order.append(queue.pop(0))
    return responses, prompts, order


@settings(max_examples=300, deadline=None)
@given(rollout=rollouts(), seed=st.integers())
def test_prefix_judging_gives_the_synchronous_batch_bit_for_bit(rollout, seed):
    responses, prompts, order = rollout
    quality = [float(row % 2) for row in range(len(responses))]
    settings_ = validate_darling({}).settings()
    sync = darling_batch(responses, quality, prompts, PrefixJudge(seed), settings_)

    judge = PrefixJudge(seed)
    stream = JudgeStream(judge, 0.5)
    stream.open()
    for row, text, finished in order:  # from the rollout's thread, as outputs arrive
        if finished:
            stream.add(row, prompts[row], text)
        else:
            stream.add_partial(row, prompts[row], text)
    streamed = stream.close()
    final = dict(enumerate(responses))
    known = usable_verdicts(streamed, final, judge.prefix_words)
    for (a, b), p in known.items():  # a kept verdict is the judge's on the final inputs
        assert p == PrefixJudge(seed)([(responses[a], responses[b])])[0]
    result = darling_batch(responses, quality, prompts, judge, settings_, known=known)
    assert np.array_equal(result.class_ids, sync.class_ids)
    assert np.array_equal(result.reward, sync.reward)
    assert np.array_equal(result.advantage, sync.advantage)
    # what the stream judged on inputs the final responses changed was judged again
    assert len(judge.sent) == result.pairs_judged + len(streamed) - len(known)


def test_a_response_settled_early_joins_its_group_before_it_finishes():
    """Two long responses of one group, each reported once its first K words are fixed:
    their pair is judged before either finishes, and the verdict is kept."""
    judge = PrefixJudge(0)
    stream = JudgeStream(judge, 0.5)
    stream.open()
    assert stream.add_partial(0, "p", "w1 w2 w3 w4 w5")
    assert not stream.add_partial(1, "p", "v1 v2 v3 v")  # 4th word may still grow
    assert stream.add_partial(1, "p", "v1 v2 v3 v4 ")
    deadline = time.monotonic() + 30
    while (0, 1) not in stream.verdicts and time.monotonic() < deadline:
        time.sleep(0.01)
    streamed = stream.close()  # the rollout has not finished either response
    assert stream.early_rows == {0, 1}
    assert list(streamed) == [(0, 1)]
    final = {0: "w1 w2 w3 w4 w5 and the rest", 1: "v1 v2 v3 v4 more text"}
    assert usable_verdicts(streamed, final, K) == {(0, 1): streamed[0, 1][2]}
    # a final response that does not begin with what was reported: the verdict is dropped
    assert usable_verdicts(streamed, {**final, 1: "v1 v2 v3 v4x"}, K) == {}


def test_a_judge_of_whole_responses_takes_no_partial_output():
    stream = JudgeStream(lambda pairs: [0.0] * len(pairs), 0.5)  # no prefix_words
    stream.open()
    assert not stream.add_partial(0, "p", "w1 w2 w3 w4 w5 w6")
    assert stream.close() == {}
