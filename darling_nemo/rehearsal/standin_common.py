"""What the rehearsal's stand-in workers share: the refit address of a fake GPU, weight
fingerprints, loading a tiny causal LM, and NeMo-RL's log-probability layout."""

from __future__ import annotations

import hashlib
import io
import os
from typing import Any

REFIT_TIMEOUT_MS = 120_000
FINGERPRINT_FILE = "rehearsal_fingerprint.json"
DEVICE_NAME = "cpu (rehearsal stand-in)"


def refit_address(node: int, local_gpu: int) -> str:
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


def serialise_state(model: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def load_causal_lm(path: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)


def token_logprobs(model: Any, input_ids: Any, input_lengths: Any) -> Any:
    """[B, S] log p(ids[t] | ids[<t]) with 0 at t = 0 and past each row's length, the layout
    NeMo-RL's policy workers return."""
    import torch

    logits = model(input_ids=input_ids).logits.float()
    logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
    taken = logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out = torch.cat([torch.zeros_like(taken[:, :1]), taken], dim=1)
    positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
    return out * (positions < input_lengths.unsqueeze(1))


class CpuLifecycle:
    """Calls NeMo-RL makes on every GPU worker that mean nothing on a CPU, answered once for
    the policy and generation stand-ins alike."""

    def is_alive(self) -> bool:
        return True

    def start_gpu_profiling(self) -> None:
        pass

    def stop_gpu_profiling(self) -> None:
        pass

    def init_collective(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "the CPU rehearsal covers colocated generation only "
            "(policy.generation.colocated.enabled=true)"
        )
