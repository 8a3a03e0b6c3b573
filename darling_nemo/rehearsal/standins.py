"""CPU stand-ins for NeMo-RL v0.4.0's GPU worker classes, used only by the rehearsal.

NeMo-RL names its GPU workers by class path (`RayWorkerBuilder("nemo_rl.models...Worker")`)
and imports them inside Ray actors. The rehearsal swaps those class paths for the classes
below (darling_nemo/rehearsal/swap.py), so NeMo-RL's own driver, `Policy`, `VllmGeneration`,
`RayWorkerGroup`, loss function, checkpointing and environments run unchanged and only the
lowest layer differs. The stand-ins really compute, on a tiny Hugging Face model in fp32:
- policy: log-probabilities, NeMo-RL's own loss function (handed in by `Policy.train`),
  gradients summed over the data-parallel ranks (gloo), an optimizer step, checkpoints
  written and read back (a weights fingerprint is checked on load);
- generation (vLLM, sync and async engine): sampling with the current weights, which
  arrive through a refit over ZeroMQ, as NeMo-RL's colocated refit does, one socket per
  fake GPU (policy rank and vLLM worker on the same GPU meet at the same address);
- reward model: a tiny sequence classifier's score.
Every public method answers the call NeMo-RL's driver makes on the real worker (names and
signatures from v0.4.0's sources); nothing NeMo-RL computes above these classes is redone.
The module imports nothing heavy at import time: Ray imports it in every worker initializer.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
from pathlib import Path
from typing import Any

import ray

from darling_nemo.rehearsal.pacing import paced

REFIT_TIMEOUT_MS = 120_000
FINGERPRINT_FILE = "rehearsal_fingerprint.json"
DEVICE_NAME = "cpu (rehearsal stand-in)"


def _refit_address(node: int, local_gpu: int) -> str:
    """ZeroMQ address of fake GPU (node, local_gpu): where the colocated policy rank sends its
    weights and the vLLM worker on the same GPU receives them."""
    root = os.environ["DARLING_REHEARSAL_DIR"]
    return f"ipc://{root}/refit-{node}-{local_gpu}.sock"


def weights_fingerprint(model: Any) -> str:
    """sha256 over every parameter's bytes, in state-dict order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _serialise_state(model: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def _load_causal_lm(path: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)


def _token_logprobs(model: Any, input_ids: Any, input_lengths: Any) -> Any:
    """[B, S] log p(ids[t] | ids[<t]) with 0 at t = 0 and past each row's length, the layout
    NeMo-RL's policy workers return."""
    import torch

    logits = model(input_ids=input_ids).logits.float()
    logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
    taken = logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out = torch.cat([torch.zeros_like(taken[:, :1]), taken], dim=1)
    positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
    return out * (positions < input_lengths.unsqueeze(1))


class _PolicyStandIn:
    """The policy worker: one per fake GPU; every rank holds the whole tiny model."""

    stands_in_for = ""

    def __init__(
        self,
        config: dict[str, Any],
        tokenizer: Any = None,
        weights_path: str | None = None,
        optimizer_path: str | None = None,
        init_optimizer: bool = True,
        init_reference_model: bool = True,
        *,
        worker_sharding_annotations: Any,
        pre_init_communication_queue: Any = None,
        **_: Any,
    ) -> None:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        self.cfg = config
        self.rank = int(os.environ["RANK"])
        self.node = int(os.environ.get("NODE_RANK", "0"))
        self.local_gpu = int(os.environ.get("LOCAL_RANK", "0"))
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            rank=self.rank,
            world_size=int(os.environ["WORLD_SIZE"]),
        )
        self._make_groups(worker_sharding_annotations)
        self.model = _load_causal_lm(weights_path or config["model_name"])
        if weights_path:
            self._check_fingerprint(Path(weights_path))
        self.reference = _load_causal_lm(config["model_name"]) if init_reference_model else None
        self.optimizer = None
        if init_optimizer:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self._learning_rate())
            if optimizer_path:
                state = torch.load(Path(optimizer_path) / "optimizer.pt", weights_only=False)
                self.optimizer.load_state_dict(state)

    # -- set-up ----------------------------------------------------------------------------

    def _make_groups(self, annotations: Any) -> None:
        """Data-parallel groups from NeMo-RL's layout [PP, DP, CP, TP], and one single-rank
        group per rank for the loss function's vocab-parallel path (its plain path calls
        .cuda())."""
        import numpy as np
        import torch.distributed as dist

        layout = np.asarray(annotations.layout)
        names = list(annotations.names)
        dp_axis = names.index("data_parallel")
        moved = np.moveaxis(layout, dp_axis, -1).reshape(-1, layout.shape[dp_axis])
        self.dp_group = None
        for ranks in moved.tolist():
            group = dist.new_group(ranks)
            if self.rank in ranks:
                self.dp_group, self.dp_size = group, len(ranks)
        for rank in range(dist.get_world_size()):
            group = dist.new_group([rank])
            if rank == self.rank:
                self.solo_group = group

    def _learning_rate(self) -> float:
        megatron = self.cfg.get("megatron_cfg") or {}
        if megatron.get("enabled"):
            return float(megatron["optimizer"]["lr"])
        return float(self.cfg["optimizer"]["kwargs"]["lr"])

    def _check_fingerprint(self, weights_path: Path) -> None:
        saved = json.loads((weights_path / FINGERPRINT_FILE).read_text())["sha256"]
        loaded = weights_fingerprint(self.model)
        if saved != loaded:
            raise RuntimeError(f"weights read back from {weights_path} differ from those saved")
        print(f"[stand-in] rank {self.rank}: weights read back, sha256 {loaded[:12]}", flush=True)

    # -- what grpo_train and Policy call ----------------------------------------------------

    def is_alive(self) -> bool:
        return True

    def report_node_ip_and_gpu_id(self) -> tuple[str, int]:
        return socket.gethostbyname(socket.gethostname()), self.local_gpu

    def get_gpu_info(self) -> dict[str, Any]:
        return {"rank": self.rank, "device": DEVICE_NAME}

    def prepare_refit_info(self) -> dict[str, Any]:
        return {k: (tuple(v.shape), v.dtype) for k, v in self.model.state_dict().items()}

    def get_free_memory_bytes(self) -> int:
        import psutil

        return int(psutil.virtual_memory().available)

    def stream_weights_via_ipc_zmq(self, buffer_size_bytes: int = 0) -> None:
        import zmq

        sock = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.SNDTIMEO, REFIT_TIMEOUT_MS)
        sock.setsockopt(zmq.RCVTIMEO, REFIT_TIMEOUT_MS)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(_refit_address(self.node, self.local_gpu))
        try:
            sock.send(_serialise_state(self.model))
            sock.recv()
        finally:
            sock.close()

    def init_collective(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "the CPU rehearsal covers colocated generation only "
            "(policy.generation.colocated.enabled=true)"
        )

    broadcast_weights_for_collective = init_collective

    def offload_before_refit(self) -> None:
        pass

    def offload_after_refit(self) -> None:
        pass

    def prepare_for_lp_inference(self) -> None:
        self.model.eval()

    def prepare_for_training(self, *args: Any, **kwargs: Any) -> None:
        self.model.train()

    def finish_training(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start_gpu_profiling(self) -> None:
        pass

    def stop_gpu_profiling(self) -> None:
        pass

    def shutdown(self) -> bool:
        return True

    @paced("logprobs")  # bench.step_time's duration model; no-op otherwise
    def get_logprobs(self, *, data: Any, micro_batch_size: int | None = None) -> Any:
        return self._logprobs(self.model, data, "logprobs")

    @paced("reference_logprobs")  # bench.step_time's duration model; no-op otherwise
    def get_reference_policy_logprobs(
        self, *, data: Any, micro_batch_size: int | None = None
    ) -> Any:
        if self.reference is None:
            raise RuntimeError("reference log-probabilities asked of a policy built without one")
        return self._logprobs(self.reference, data, "reference_logprobs")

    def _logprobs(self, model: Any, data: Any, key: str) -> Any:
        import torch
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        with torch.no_grad():
            values = _token_logprobs(model, data["input_ids"], data["input_lengths"])
        return BatchedDataDict({key: values})

    @paced("training")  # bench.step_time's duration model; no-op otherwise
    def train(
        self,
        data: Any,
        loss_fn: Any,
        eval_mode: bool = False,
        gbs: int | None = None,
        mbs: int | None = None,
    ) -> dict[str, Any]:
        """Global batches of `gbs` over the data-parallel ranks, micro-batches of `mbs`,
        NeMo-RL's loss function normalised by the global valid sequences and tokens (as its
        workers do), gradients summed over the DP group, clipped, one optimizer step each."""
        import torch
        import torch.distributed as dist

        gbs = gbs or self.cfg["train_global_batch_size"]
        mbs = mbs or self.cfg["train_micro_batch_size"]
        total = torch.tensor([data.size])
        dist.all_reduce(total, group=self.dp_group)
        num_global_batches = int(total.item()) // gbs
        if num_global_batches == 0:
            raise ValueError(f"{int(total.item())} samples is less than one global batch ({gbs})")
        losses, metrics, grad_norm = [], [], torch.tensor([0.0])
        self.model.train(not eval_mode)
        for index in range(num_global_batches):
            batch = data.get_batch(batch_idx=index, batch_size=gbs // self.dp_size)
            valid = torch.stack(
                [
                    batch["sample_mask"].sum(),
                    (batch["token_mask"][:, 1:] * batch["sample_mask"].unsqueeze(-1)).sum(),
                ]
            ).float()
            dist.all_reduce(valid, group=self.dp_group)
            if self.optimizer is not None:
                self.optimizer.zero_grad()
            batch_loss = 0.0
            for micro in self._micro_batches(batch, mbs):
                logits = self.model(input_ids=micro["input_ids"]).logits.float()
                loss, loss_metrics = loss_fn(
                    logits,
                    micro,
                    valid[0],
                    valid[1],
                    vocab_parallel_rank=0,
                    vocab_parallel_group=self.solo_group,
                )
                if not eval_mode:
                    loss.backward()
                batch_loss += loss.item()
                loss_metrics = {k: v / num_global_batches for k, v in loss_metrics.items()}
                loss_metrics["lr"] = self.optimizer.param_groups[0]["lr"] if self.optimizer else 0.0
                loss_metrics["global_valid_seqs"] = float(valid[0])
                loss_metrics["global_valid_toks"] = float(valid[1])
                metrics.append(loss_metrics)
            if not eval_mode:
                grad_norm = self._reduce_clip_step()
            losses.append(batch_loss)
        global_loss = torch.tensor(losses)
        dist.all_reduce(global_loss, group=self.dp_group)
        all_mb_metrics: dict[str, list[Any]] = {}
        for m in metrics:
            for key, value in m.items():
                all_mb_metrics.setdefault(key, []).append(value)
        return {
            "global_loss": global_loss,
            "grad_norm": grad_norm,
            "rank": self.rank,
            "gpu_name": DEVICE_NAME,
            "model_dtype": torch.float32,
            "all_mb_metrics": all_mb_metrics,
        }

    def _micro_batches(self, batch: Any, mbs: int) -> Any:
        """Micro-batches as NeMo-RL's workers cut them: by the packing plan Policy.train
        attached (sequence packing, dynamic batching), else `mbs` rows at a time. Packed
        sequences run here as one padded batch; the loss sees the same rows."""
        if self.cfg["dynamic_batching"]["enabled"]:
            return batch.make_microbatch_iterator_with_dynamic_shapes()
        if self.cfg["sequence_packing"]["enabled"]:
            return batch.make_microbatch_iterator_for_packable_sequences()
        return batch.make_microbatch_iterator(mbs)

    def _reduce_clip_step(self) -> Any:
        import torch
        import torch.distributed as dist

        params = [p for p in self.model.parameters() if p.grad is not None]
        for p in params:
            dist.all_reduce(p.grad, group=self.dp_group)
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg["max_grad_norm"] or float("inf"))
        self.optimizer.step()
        return torch.tensor([float(norm)])

    def _save(self, weights_path: str, optimizer_path: str | None, model_format: str) -> None:
        """Rank 0 writes (every rank holds the same weights); the others wait for it."""
        import torch
        import torch.distributed as dist

        if self.rank == 0:
            out = Path(weights_path)
            out.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(str(out), safe_serialization=model_format != "torch_save")
            record = {
                "sha256": weights_fingerprint(self.model),
                "stands_in_for": self.stands_in_for,
            }
            (out / FINGERPRINT_FILE).write_text(json.dumps(record))
            if optimizer_path and self.optimizer is not None:
                Path(optimizer_path).mkdir(parents=True, exist_ok=True)
                torch.save(self.optimizer.state_dict(), Path(optimizer_path) / "optimizer.pt")
        dist.barrier()

    def score(self, data: Any) -> Any:
        raise NotImplementedError(f"{self.stands_in_for}.score is only asked of reward models")


class MegatronPolicyWorkerStandIn(_PolicyStandIn):
    stands_in_for = "nemo_rl.models.policy.megatron_policy_worker.MegatronPolicyWorker"

    def save_checkpoint(
        self, weights_path: str, optimizer_path: str | None = None, **kwargs: Any
    ) -> None:
        self._save(weights_path, optimizer_path, "safetensors")


class DTensorPolicyWorkerStandIn(_PolicyStandIn):
    stands_in_for = "nemo_rl.models.policy.dtensor_policy_worker.DTensorPolicyWorker"

    def save_checkpoint(
        self,
        weights_path: str,
        optimizer_path: str | None = None,
        tokenizer_path: str | None = None,
    ) -> None:
        self._save(weights_path, optimizer_path, "safetensors")


class DTensorPolicyWorkerV2StandIn(_PolicyStandIn):
    """The DTensor v2 worker; also what NeMo-RL's RewardModelEnvironment builds (`score`)."""

    stands_in_for = "nemo_rl.models.policy.dtensor_policy_worker_v2.DTensorPolicyWorkerV2"

    def __init__(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        self.is_reward_model = bool((config.get("reward_model_cfg") or {}).get("enabled"))
        if not self.is_reward_model:
            super().__init__(config, *args, **kwargs)
            return
        import torch
        from transformers import AutoModelForSequenceClassification

        torch.set_num_threads(1)
        self.cfg, self.rank = config, int(os.environ["RANK"])
        self.node = int(os.environ.get("NODE_RANK", "0"))
        self.local_gpu = int(os.environ.get("LOCAL_RANK", "0"))
        self.model = AutoModelForSequenceClassification.from_pretrained(
            config["model_name"], torch_dtype=torch.float32
        ).eval()

    def score(self, data: Any) -> Any:
        import torch
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        if not self.is_reward_model:
            return super().score(data)
        with torch.no_grad():
            ids, lengths = data["input_ids"], data["input_lengths"]
            mask = torch.arange(ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
            logits = self.model(input_ids=ids, attention_mask=mask.long()).logits
        return BatchedDataDict({"scores": logits[:, 0].float()})

    def save_checkpoint(
        self,
        weights_path: str,
        optimizer_path: str | None = None,
        tokenizer_path: str | None = None,
        checkpointing_cfg: dict[str, Any] | None = None,
    ) -> None:
        model_format = (checkpointing_cfg or {}).get("model_save_format") or "safetensors"
        self._save(weights_path, optimizer_path, model_format)


class VllmGenerationWorkerStandIn:
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
        self.model = _load_causal_lm(config["model_name"]).eval()
        self.generator = torch.Generator().manual_seed((seed or 0) * 1000 + node * 100 + gpus[0])
        self._sockets: dict[tuple[int, int], Any] = {}

    # -- lifecycle and refit ------------------------------------------------------------------

    def post_init(self) -> None:
        pass

    def is_alive(self) -> bool:
        return True

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

    def start_gpu_profiling(self) -> None:
        pass

    def stop_gpu_profiling(self) -> None:
        pass

    def shutdown(self) -> bool:
        for sock in self._sockets.values():
            sock.close()
        return True

    def init_collective(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "the CPU rehearsal covers colocated generation only "
            "(policy.generation.colocated.enabled=true)"
        )

    update_weights_from_collective = init_collective

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
                sock.bind(_refit_address(*device))
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

    @paced("generation")  # bench.step_time's duration model; no-op otherwise
    def generate(self, data: Any, greedy: bool = False) -> Any:
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
        for index in range(len(data["input_lengths"])):
            row = data.slice(index, index + 1)
            yield index, self.generate(row, greedy)


# Ray actor classes, as NeMo-RL's own workers are (`@ray.remote class ...Worker`);
# RayWorkerBuilder calls `.options(...).remote(...)` and `configure_worker` on them.
MegatronPolicyWorker = ray.remote(MegatronPolicyWorkerStandIn)
DTensorPolicyWorker = ray.remote(DTensorPolicyWorkerStandIn)
DTensorPolicyWorkerV2 = ray.remote(DTensorPolicyWorkerV2StandIn)
VllmGenerationWorker = ray.remote(VllmGenerationWorkerStandIn)
VllmAsyncGenerationWorker = ray.remote(VllmAsyncGenerationWorkerStandIn)

STAND_INS: dict[str, str] = {
    stand_in.stands_in_for: f"{__name__}.{stand_in.stands_in_for.rsplit('.', 1)[1]}"
    for stand_in in (
        MegatronPolicyWorkerStandIn,
        DTensorPolicyWorkerStandIn,
        DTensorPolicyWorkerV2StandIn,
        VllmGenerationWorkerStandIn,
        VllmAsyncGenerationWorkerStandIn,
    )
}
