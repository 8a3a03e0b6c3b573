"""darling_nemo's prefix-reporting vLLM worker built on NeMo-RL v0.4.0's own
`VllmAsyncGenerationWorker` (with vLLM 0.10.0's code from containers/vllm_contract_env.sh):
NeMo-RL's `generate_async` runs unchanged, one sample per call as NeMo-RL's rollouts send
it, and the sample's settled words reach the inbox once, from vLLM's own `RequestOutput`s.
Only the engine is replaced (vLLM's AsyncLLM needs a GPU): it yields the cumulative outputs a
request produces, a token at a time. Runs in a child process, so vLLM stays out of this one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("nemo_rl")
pytestmark = pytest.mark.nemo_rl

from helpers import REPO  # noqa: E402

from darling_nemo.rehearsal.contract_vllm import sources  # noqa: E402

FOUND, WHY = sources()

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    import torch
    from darling_nemo.rehearsal.contract_vllm import gpu_stand_ins
    gpu_stand_ins()
    from vllm import SamplingParams
    from vllm.outputs import CompletionOutput, RequestOutput
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from darling_nemo.nemo_rl import prefix_worker

    WORDS = [" w%d" % k for k in range(40)]  # one word per token

    class Engine:  # vLLM's AsyncLLM.generate: cumulative outputs, a token at a time
        async def generate(self, prompt, sampling_params, request_id):
            for k in range(1, sampling_params.max_tokens + 1):
                await asyncio.sleep(0)
                done = k == sampling_params.max_tokens
                completion = CompletionOutput(
                    index=0, text="".join(WORDS[:k]), token_ids=list(range(100, 100 + k)),
                    cumulative_logprob=None, logprobs=None,
                    finish_reason="length" if done else None,
                )
                yield RequestOutput(
                    request_id=request_id, prompt=None, prompt_token_ids=prompt["prompt_token_ids"],
                    prompt_logprobs=None, outputs=[completion], finished=done,
                )

    sent = []
    prefix_worker.send_to_inbox = lambda *item: sent.append(list(item))
    worker_class = prefix_worker.PrefixReportingVllmAsyncWorker.__ray_metadata__.modified_class
    worker = worker_class.__new__(worker_class)
    worker.cfg = {
        "vllm_cfg": {"async_engine": True, "max_model_len": 64}, "max_new_tokens": 24,
        "_pad_token_id": 0, "top_k": None, "top_p": 1.0, "temperature": 1.0,
        "stop_token_ids": None, "stop_strings": None,
    }
    worker.SamplingParams = SamplingParams
    worker.llm = prefix_worker.ReportingEngine(Engine())  # as _create_engine leaves it

    def one_sample(tag):
        data = BatchedDataDict({
            "input_ids": torch.tensor([[5, 6, 7, 0]]), "input_lengths": torch.tensor([3]),
            "stop_strings": [None],
        })
        if tag:
            data[prefix_worker.PREFIX_TAG] = [tag]
        return data

    async def run(data):
        return [item async for item in worker.generate_async(data)]

    tagged = asyncio.run(run(one_sample(["inbox-1", 4, 6])))
    untagged = asyncio.run(run(one_sample(None)))
    print(json.dumps({
        "sent": sent,
        "tagged": tagged[0][1]["output_ids"].tolist(),
        "untagged": untagged[0][1]["output_ids"].tolist(),
    }))
    """
)


@pytest.mark.skipif(FOUND is None, reason=WHY)
def test_nemo_rls_own_generate_async_reports_settled_words_once():
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*FOUND, str(REPO)])}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # 6 words are settled once a 7th has begun: reported once, for row 4 of inbox-1
    assert out["sent"] == [["inbox-1", 4, "w0 w1 w2 w3 w4 w5"]]
    # NeMo-RL's result is the same with or without the tag: prompt, then the 24 tokens
    expected = [[5, 6, 7, *range(100, 124)]]
    assert out["tagged"] == out["untagged"] == expected
