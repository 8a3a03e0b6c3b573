"""Bit fingerprints of the torch primitives the miniature's training and sampling use.

    uv run python -m darling_nemo.mini.fingerprint            # one line per primitive
    uv run python -m darling_nemo.mini.fingerprint --json     # for the reference test

Each line hashes one primitive's output on fixed inputs under `cpu_kernels: portable` (set
here before torch computes anything, one thread). Two machines that print the same line
compute that primitive bit for bit alike; run it on two CPUs and diff to find the one that
differs. Lines in CPU_DEPENDENT are known to differ between an Intel Xeon and an AMD EPYC
under these settings (torch's AdamW; its sqrt, MKL's vector maths, is the cause we found); the
miniature avoids them (darling_nemo/mini/optim.py). The lines of `held_across_cpus` held on
both, so a test checks them on any x86-64 CPU with AVX2: a change of a held package or of the
kernel settings moves them (tests/trl_engine/test_mini_reference.py).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator

from darling_nemo.mini.reproducibility import pin_cpu_kernels, run_conditions

CPU_DEPENDENT = ("torch sqrt (MKL vsSqrt)", "torch AdamW 3 steps")
# Seen on an Intel Xeon only (it is new): the reference test compares it where the weights are
# compared (per CPU family), not everywhere, until a second CPU family confirms it.
ONE_CPU_ONLY = ("PortableAdamW 3 steps",)


def held_across_cpus(hashes: dict[str, str]) -> dict[str, str]:
    """The lines two CPU families (an Intel Xeon, an AMD EPYC) computed alike."""
    return {k: v for k, v in hashes.items() if k not in CPU_DEPENDENT + ONE_CPU_ONLY}


def digest(tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def _randn(*shape: int, seed: int):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _matmuls() -> Iterator[tuple[str, object]]:
    for m, k, n in [(1, 64, 64), (8, 64, 64), (64, 128, 96), (7, 33, 129), (256, 64, 512)]:
        yield f"matmul {m}x{k}@{k}x{n}", _randn(m, k, seed=1) @ _randn(k, n, seed=2)


def _elementwise() -> Iterator[tuple[str, object]]:
    import torch
    import torch.nn.functional as F

    x = _randn(8, 64, seed=5)
    yield "exp", torch.exp(x)
    yield "log", torch.log(x.abs() + 1e-3)
    yield "sin/cos", torch.sin(x) + torch.cos(x)
    yield "pow/mean/rsqrt (RMSNorm)", x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    yield "silu", F.silu(x)
    yield "softmax", torch.softmax(x, -1)
    yield "log_softmax", torch.log_softmax(x, -1)
    yield "torch sqrt (MKL vsSqrt)", torch.sqrt(x.abs() * 1e-3)


def _training() -> Iterator[tuple[str, object]]:
    import torch
    import torch.nn.functional as F

    from darling_nemo.mini.optim import PortableAdamW

    x, target = _randn(8, 64, seed=5), torch.arange(8)
    q, k, v = (_randn(1, 4, 16, 8, seed=s) for s in (6, 7, 8))
    q.requires_grad_(True)
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    yield "sdpa causal backward", q.grad
    yield "cross_entropy", F.cross_entropy(_randn(32, 50, seed=9), torch.arange(32) % 50)[None]
    for name, optimizer in [("torch AdamW", torch.optim.AdamW), ("PortableAdamW", PortableAdamW)]:
        torch.manual_seed(0)
        net = torch.nn.Linear(64, 50)
        opt = optimizer(net.parameters(), lr=1e-3)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(net(x), target).backward()
            opt.step()
        yield f"{name} 3 steps", torch.cat([p.detach().flatten() for p in net.parameters()])
    torch.manual_seed(0)
    probs = torch.softmax(_randn(16, 50, seed=10), -1)
    yield "multinomial", torch.multinomial(probs, 8, replacement=True).float()


# The fingerprint's Llama: these values are part of every recorded hash (the shipped
# cpu-fingerprint files and the ones users compare against), so they never change.
TINY_LLAMA = {
    "vocab_size": 64,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "tie_word_embeddings": True,
}


def _tiny_llama() -> Iterator[tuple[str, object]]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**TINY_LLAMA)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    yield "tiny llama init", torch.cat([p.detach().flatten() for p in model.parameters()])
    ids = torch.randint(0, 64, (4, 24), generator=torch.Generator().manual_seed(11))
    out = model(input_ids=ids, labels=ids)
    yield "tiny llama logits", out.logits
    out.loss.backward()
    yield "tiny llama grads", torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.manual_seed(0)
    sampled = model.generate(
        ids[:, :4], do_sample=True, max_new_tokens=16, top_k=0, top_p=1.0, pad_token_id=0
    )
    yield "tiny llama sampling", sampled.float()


SECTIONS: tuple[Callable[[], Iterator[tuple[str, object]]], ...] = (
    _matmuls,
    _elementwise,
    _training,
    _tiny_llama,
)


def fingerprint() -> dict[str, str]:
    """Primitive name -> hash, under the kernel settings this process already has."""
    import torch

    torch.set_num_threads(1)
    return {name: digest(out) for section in SECTIONS for name, out in section()}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    for warning in pin_cpu_kernels("portable"):  # before torch computes anything
        print(f"warning: {warning}", file=sys.stderr)
    hashes = fingerprint()
    conditions = run_conditions()
    if "--json" in argv:
        print(json.dumps({"conditions": conditions, "hashes": hashes}, sort_keys=True))
        return
    print(f"# cpu={conditions['cpu']} torch={conditions['torch']} python={conditions['python']}")
    for name, value in hashes.items():
        note = "  (differs between CPUs)" if name in CPU_DEPENDENT else ""
        print(f"{name:<32} {value}{note}")


if __name__ == "__main__":
    main()
