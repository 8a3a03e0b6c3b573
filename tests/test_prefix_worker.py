"""The generation worker's half of prefix-complete judging (darling_nemo/nemo_rl/prefix_worker.py)
that needs neither Ray nor vLLM: when a sample's settled words are sent, that they are sent
once, and that the engine's outputs reach the sample's reporter through NeMo-RL's pattern of
one asyncio task per sample. The whole path runs in the NeMo-RL part (grpo_train with
reports, tests/nemo_rl_engine/test_nemo_rl_integration.py) and in every rehearsal."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from darling_nemo.nemo_rl import prefix_worker
from darling_nemo.nemo_rl.prefix_worker import (
    CHECK_EVERY,
    PREFIX_TAG,
    ReportingEngine,
    SettledReporter,
    TaggedGeneration,
    reporting,
)


def test_settled_words_are_sent_once_when_first_looked_at():
    sent = []
    reporter = SettledReporter(["inbox", 5, 2], lambda *item: sent.append(item))
    text = "one two three"
    for _ in range(1, CHECK_EVERY):  # looked at only every CHECK_EVERY outputs
        reporter.see(text)
    assert sent == []
    reporter.see(text)  # the CHECK_EVERY-th output: "one two" is settled (a third word)
    assert sent == [("inbox", 5, "one two")]
    for _ in range(3 * CHECK_EVERY):
        reporter.see(text + " more", now=True)
    assert len(sent) == 1  # never again


def test_the_last_output_is_looked_at_and_an_unsettled_text_is_not_sent():
    sent = []
    reporter = SettledReporter(["inbox", 0, 2], lambda *item: sent.append(item))
    reporter.see("one tw", now=True)  # the second word may still grow
    assert sent == []
    reporter.see("one two ", now=True)
    assert sent == [("inbox", 0, "one two")]


class Engine:
    """vLLM's AsyncLLM as the worker calls it: generate() is an async generator of
    cumulative outputs (text so far, finished on the last)."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.slept = False

    async def generate(self, prompt, sampling_params, request_id):
        for k in range(1, len(self.words) + 1):
            await asyncio.sleep(0)
            text = " ".join(self.words[:k])
            yield SimpleNamespace(
                outputs=[SimpleNamespace(text=text)], finished=k == len(self.words)
            )

    def sleep(self) -> str:
        return "asleep"


def test_the_engine_reports_for_the_sample_whose_generate_async_made_the_request(monkeypatch):
    sent = []
    monkeypatch.setattr(prefix_worker, "send_to_inbox", lambda *item: sent.append(item))
    engine = ReportingEngine(Engine([f"w{k}" for k in range(40)]))
    assert engine.sleep() == "asleep"  # everything else is the engine's

    async def generate_async(tag):
        # NeMo-RL v0.4.0's worker: one asyncio task per sample, the engine called inside it
        async def process_single_sample():
            return [
                o async for o in engine.generate(prompt="p", sampling_params=None, request_id="r")
            ]

        with reporting(tag):
            return await asyncio.create_task(process_single_sample())

    async def both():
        return await asyncio.gather(generate_async(["inbox", 3, 4]), generate_async(None))

    tagged, untagged = asyncio.run(both())
    assert len(tagged) == len(untagged) == 40  # every output passes through unchanged
    assert sent == [("inbox", 3, "w0 w1 w2 w3")]  # the tagged sample only, once


def test_a_tagged_generation_call_carries_the_tag_per_sample():
    seen = {}

    class Generation:
        def __init__(self) -> None:
            self.cfg = {"vllm_cfg": {"async_engine": True}}

        def generate_async(self, data, greedy=False):
            seen.update(data)
            return "stream"

    tagged = TaggedGeneration(Generation(), ["inbox", 7, 1022])
    assert tagged.cfg["vllm_cfg"]["async_engine"]  # NeMo-RL reads the wrapped one's config
    assert tagged.generate_async({"input_lengths": [12]}) == "stream"
    assert seen[PREFIX_TAG] == [["inbox", 7, 1022]]


def test_a_changed_nemo_rl_worker_is_refused_naming_the_method():
    from darling_nemo.nemo_rl.prefix_worker import check_worker

    class V040:
        def _create_engine(self, llm_kwargs): ...

        async def generate_async(self, data, greedy=False): ...

    class Changed(V040):
        async def generate_async(self, data, greedy=False, stream=True): ...

    check_worker(V040)
    with pytest.raises(RuntimeError) as refused:
        check_worker(Changed)
    assert "Changed.generate_async: ('self', 'data', 'greedy', 'stream')" in str(refused.value)
    assert "darling.prefix_judging=false" in str(refused.value)
