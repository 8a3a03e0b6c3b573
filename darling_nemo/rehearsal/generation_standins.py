"""Stand-ins for NeMo-RL v0.4.0's vLLM generation workers (sync and async engine). See
standins.py."""

from __future__ import annotations

import asyncio
import io
import os
import time
from typing import Any

from darling_nemo.nemo_rl.prefix_worker import (
    PREFIX_TAG,
    SettledReporter,
    inbox_actor,
    send_to_inbox,
)
from darling_nemo.rehearsal.pacing import (
    paced,
    response_seconds,
    seconds_left,
    settle_seconds,
)
from darling_nemo.rehearsal.standin_common import (
    REFIT_TIMEOUT_MS,
    CpuLifecycle,
    load_causal_lm,
    refit_address,
)


class VllmGenerationWorkerStandIn(CpuLifecycle):
    """vLLM's synchronous generation worker: samples with a tiny HF model on CPU."""

    stands_in_for = "nemo_rl.models.generation.vllm.vllm_worker.VllmGenerationWorker"

    @staticmethod
    def configure_worker(
        num_gpus: float, bundle_indices: tuple[int, list[int]] | None = None
    ) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
        init_kwargs: dict[str, Any] = {}
        if bundle_indices is not None:
            init_kwargs = {"node_index": bundle_indices[0], "bundle_indices": bundle_indices[1]}
        return {"num_gpus": num_gpus}, {}, init_kwargs

    def __init__(
        self,
        config: dict[str, Any],
        bundle_indices: list[int] | None = None,
        fraction_of_gpus: float = 1.0,
        seed: int | None = None,
        node_index: int | None = None,
    ) -> None:
        import torch

        torch.set_num_threads(1)
        self.cfg = config
        node = int(os.environ.get("NODE_RANK", "0")) if node_index is None else node_index
        gpus = bundle_indices or [int(os.environ.get("LOCAL_RANK", "0"))]
        self.devices = [(node, gpu) for gpu in gpus]
        self.model = load_causal_lm(config["model_name"]).eval()
        self.generator = torch.Generator().manual_seed((seed or 0) * 1000 + node * 100 + gpus[0])
        self._sockets: dict[tuple[int, int], Any] = {}
        self.responses_started = 0  # the async engine's response-length model counts them

    # -- lifecycle and refit ------------------------------------------------------------------

    def post_init(self) -> None:
        pass

    def report_device_id(self) -> list[str]:
        return [f"rehearsal-gpu-{node}-{gpu}" for node, gpu in self.devices]

    def report_dp_openai_server_base_url(self) -> str | None:
        return None

    def prepare_refit_info(self, state_dict_info: dict[str, Any]) -> None:
        self.expected = state_dict_info

    def wake_up(self, **kwargs: Any) -> None:
        pass

    def sleep(self) -> None:
        pass

    def reset_prefix_cache(self) -> None:
        pass

    def shutdown(self) -> bool:
        for sock in self._sockets.values():
            sock.close()
        return True

    update_weights_from_collective = CpuLifecycle.init_collective

    def update_weights_via_ipc_zmq(self) -> bool:
        """Receive the weights from the policy rank on each of this worker's GPUs; every
        copy must agree (they are the same model) and match the announced names/shapes."""
        import torch
        import zmq

        received = []
        for device in self.devices:
            if device not in self._sockets:
                sock = zmq.Context.instance().socket(zmq.REP)
                sock.setsockopt(zmq.RCVTIMEO, REFIT_TIMEOUT_MS)
                sock.bind(refit_address(*device))
                self._sockets[device] = sock
            sock = self._sockets[device]
            payload = sock.recv()
            sock.send(b"ok")
            received.append(torch.load(io.BytesIO(payload), weights_only=True))
        state = received[0]
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        if shapes != {k: tuple(v[0]) for k, v in self.expected.items()}:
            raise RuntimeError("refit: the weights received differ from prepare_refit_info")
        for other in received[1:]:
            if any(not torch.equal(state[k], other[k]) for k in state):
                raise RuntimeError(
                    "refit: the policy ranks of one vLLM worker sent different weights"
                )
        self.model.load_state_dict(state)
        return True

    # -- generation --------------------------------------------------------------------------

    def _sample_one(self, prompt: Any, greedy: bool) -> tuple[list[int], list[float]]:
        """Autoregressive sampling with the generation config; the returned log-probabilities
        are of the raw logits, as vLLM returns them (so they equal the policy's own)."""
        import torch

        cfg = self.cfg
        budget = min(cfg["max_new_tokens"], cfg["vllm_cfg"]["max_model_len"] - len(prompt))
        stop = set(cfg.get("stop_token_ids") or []) | {cfg["_pad_token_id"]}
        ids, tokens, logprobs = prompt.clone(), [], []
        with torch.no_grad():
            for _ in range(max(budget, 0)):
                logits = self.model(input_ids=ids.unsqueeze(0)).logits[0, -1].float()
                raw = torch.log_softmax(logits, dim=-1)
                if greedy:
                    token = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / cfg["temperature"], dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=self.generator))
                tokens.append(token)
                logprobs.append(float(raw[token]))
                ids = torch.cat([ids, torch.tensor([token], dtype=ids.dtype)])
                if token in stop:
                    break
        return tokens, logprobs

    @paced("generation", "generation_decode")  # bench.step_time's model; no-op otherwise
    def generate(self, data: Any, greedy: bool = False) -> Any:
        return self._generate(data, greedy)

    def _generate(self, data: Any, greedy: bool) -> Any:
        import torch
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        input_ids, lengths = data["input_ids"], data["input_lengths"]
        samples = [
            self._sample_one(input_ids[i, : int(lengths[i])], greedy) for i in range(len(lengths))
        ]
        width = input_ids.shape[1] + max((len(t) for t, _ in samples), default=0)
        output_ids = torch.full((len(samples), width), self.cfg["_pad_token_id"], dtype=torch.long)
        logprobs = torch.zeros((len(samples), width), dtype=torch.float32)
        for i, (tokens, token_logprobs) in enumerate(samples):
            start = int(lengths[i])
            output_ids[i, :start] = input_ids[i, :start]
            output_ids[i, start : start + len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            logprobs[i, start : start + len(tokens)] = torch.tensor(token_logprobs)
        return BatchedDataDict(
            {
                "output_ids": output_ids,
                "logprobs": logprobs,
                "generation_lengths": torch.tensor([len(t) for t, _ in samples]),
                "unpadded_sequence_lengths": torch.tensor(
                    [int(lengths[i]) + len(t) for i, (t, _) in enumerate(samples)]
                ),
            }
        )


class VllmAsyncGenerationWorkerStandIn(VllmGenerationWorkerStandIn):
    """vLLM's async-engine worker: the same sampling behind the `*_async` methods, and
    `generate_async` yielding one (index, result) per sample as it finishes."""

    stands_in_for = "nemo_rl.models.generation.vllm.vllm_worker_async.VllmAsyncGenerationWorker"

    async def post_init_async(self) -> None:
        self.post_init()

    async def report_device_id_async(self) -> list[str]:
        return self.report_device_id()

    async def prepare_refit_info_async(self, state_dict_info: dict[str, Any]) -> None:
        self.prepare_refit_info(state_dict_info)

    async def update_weights_via_ipc_zmq_async(self) -> bool:
        return self.update_weights_via_ipc_zmq()

    async def wake_up_async(self, **kwargs: Any) -> None:
        pass

    async def sleep_async(self) -> None:
        pass

    async def reset_prefix_cache_async(self) -> None:
        pass

    async def generate_async(self, data: Any, greedy: bool = False) -> Any:
        """Each response lasts what bench.step_time's response-length model says (nothing
        without a model), asleep so that the worker's other requests go on meanwhile, as
        vLLM's continuous batching does."""
        for index in range(len(data["input_lengths"])):
            started = time.perf_counter()
            self.responses_started += 1
            result = self._generate(data.slice(index, index + 1), greedy)
            await asyncio.sleep(seconds_left(response_seconds(self.responses_started), started))
            yield index, result


class PrefixReportingVllmAsyncWorkerStandIn(VllmAsyncGenerationWorkerStandIn):
    """darling_nemo's prefix-reporting async worker (nemo_rl/prefix_worker.py): the same
    sampling, with each response's text shown to the production `SettledReporter` as it
    grows, token by token, over the response's paced duration, as vLLM's cumulative outputs
    reach the real worker's reporter. A response whose words were sent is held until the
    driver's inbox poller has taken them (at most HOLD_S), as a real one generates on for
    thousands of tokens after its words settle."""

    HOLD_S = 30.0

    stands_in_for = "darling_nemo.nemo_rl.prefix_worker.PrefixReportingVllmAsyncWorker"

    async def generate_async(self, data: Any, greedy: bool = False) -> Any:
        from transformers import AutoTokenizer

        if not hasattr(self, "tokenizer"):
            self.tokenizer = AutoTokenizer.from_pretrained(self.cfg["model_name"])
        tags = data.get(PREFIX_TAG) or [None] * len(data["input_lengths"])
        for index in range(len(data["input_lengths"])):
            started = time.perf_counter()
            self.responses_started += 1
            call = self.responses_started  # other samples' calls go on while this one sleeps
            result = self._generate(data.slice(index, index + 1), greedy)
            length = int(result["generation_lengths"][0])
            start = int(data["input_lengths"][index])
            tokens = result["output_ids"][0, start : start + length].tolist()
            reporter = SettledReporter(tags[index], send_to_inbox) if tags[index] else None
            settle = settle_seconds(call)
            if settle is not None and settle >= response_seconds(call):
                reporter = None  # settled only by its end: it joins when it finishes
            if reporter is not None and settle is not None:
                # bench.step_time: the words settle when the paper-scale response reaches
                # the judge's word budget (pacing.settle_seconds), not at the tiny text's
                await asyncio.sleep(seconds_left(settle, started))
                text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                reporter.see(text, now=True)
            elif reporter is not None:
                for produced in range(1, len(tokens) + 1):
                    await asyncio.sleep(0)
                    text = self.tokenizer.decode(tokens[:produced], skip_special_tokens=True)
                    reporter.see(text, now=produced == len(tokens))
                if reporter.sent:
                    await taken_by_the_driver(reporter.inbox, self.HOLD_S)
            await asyncio.sleep(seconds_left(response_seconds(call), started))
            yield index, result


async def taken_by_the_driver(inbox: str, hold_s: float) -> None:
    """Wait until the driver's poller has emptied the inbox (or `hold_s` passed)."""
    deadline = time.monotonic() + hold_s
    while await inbox_actor(inbox).pending.remote() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
