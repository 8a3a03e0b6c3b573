"""Stand-ins for NeMo-RL v0.4.0's policy workers (Megatron, DTensor, DTensor v2 and the
reward model NeMo-RL's RewardModelEnvironment builds). See standins.py."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np

from darling_nemo.rehearsal.pacing import paced
from darling_nemo.rehearsal.standin_common import (
    DEVICE_NAME,
    FINGERPRINT_FILE,
    REFIT_TIMEOUT_MS,
    CpuLifecycle,
    load_causal_lm,
    refit_address,
    serialise_state,
    token_logprobs,
    weights_fingerprint,
)


class _PolicyStandIn(CpuLifecycle):
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
        self.model = load_causal_lm(weights_path or config["model_name"])
        if weights_path:
            self._check_fingerprint(Path(weights_path))
        self.reference = load_causal_lm(config["model_name"]) if init_reference_model else None
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
        sock.connect(refit_address(self.node, self.local_gpu))
        try:
            sock.send(serialise_state(self.model))
            sock.recv()
        finally:
            sock.close()

    broadcast_weights_for_collective = CpuLifecycle.init_collective

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
            values = token_logprobs(model, data["input_ids"], data["input_lengths"])
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
