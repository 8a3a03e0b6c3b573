"""PortableAdamW (darling_nemo/mini/optim.py): a correctly rounded sqrt, otherwise torch's AdamW.

The miniature's bits must not depend on the CPU; torch's AdamW takes its sqrt from MKL's vector
maths, whose rounding does. These tests hold the two halves of that claim: the sqrt is the
IEEE-754 one, and everything else is torch's update op for op (bit-identical wherever torch's
own sqrt is correctly rounded, which MKL's AVX2 branch is on an AVX2 CPU).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import RECIPE_ENV, REPO, run_python

from darling_nemo.mini.optim import PortableAdamW, correctly_rounded_sqrt, optimizer_class


def test_the_sqrt_is_correctly_rounded_on_random_and_edge_values():
    generator = torch.Generator().manual_seed(0)
    values = torch.cat(
        [
            torch.rand(200_000, generator=generator) * 10,
            torch.rand(200_000, generator=generator) * 1e-30,  # small, normal and subnormal
            torch.tensor([0.0, 1e-45, 1.0, 2.0, 4.0, 3.4e38, float("inf")]),
        ]
    )
    # float32 sqrt through float64 is correctly rounded: 53 >= 2 * 24 + 2 bits (no double
    # rounding error), and numpy's float64 sqrt is the CPU's IEEE instruction.
    expected = torch.from_numpy(np.sqrt(values.double().numpy()).astype(np.float32))
    assert torch.equal(correctly_rounded_sqrt(values), expected)
    assert correctly_rounded_sqrt(values).dtype == torch.float32


def test_unsupported_options_are_refused_by_name():
    params = [torch.nn.Parameter(torch.zeros(2))]
    for option in ("amsgrad", "foreach", "fused"):
        with pytest.raises(ValueError, match=option):
            PortableAdamW(params, **{option: True})
    assert optimizer_class("adamw_torch") is torch.optim.AdamW
    with pytest.raises(ValueError, match="adamw_bogus"):
        optimizer_class("adamw_bogus")


PARITY = """
import hashlib, json, sys
import torch, torch.nn.functional as F
from darling_nemo.mini.optim import PortableAdamW

torch.set_num_threads(1)
x = torch.rand(100_000) * 10
sqrt_exact = bool((x.sqrt() == x.double().sqrt().float()).all())

def train(first, then, steps=12):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 10))
    groups = lambda: [{"params": list(net[0].parameters()), "weight_decay": 0.1},
                      {"params": list(net[2].parameters()), "weight_decay": 0.0}]
    opt = first(groups(), lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        if step == steps // 2:  # a checkpoint taken by one optimizer, resumed by the other
            state = opt.state_dict()
            opt = then(groups(), lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
            opt.load_state_dict(state)
        xb, t = torch.randn(8, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
        opt.zero_grad()
        F.cross_entropy(net(xb), t).backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()

AdamW = torch.optim.AdamW
print(json.dumps({"sqrt_exact": sqrt_exact, "torch": train(AdamW, AdamW),
                  "portable": train(PortableAdamW, PortableAdamW),
                  "mixed": train(PortableAdamW, AdamW)}))
"""


def test_it_is_torchs_adamw_wherever_torchs_sqrt_is_correctly_rounded(tmp_path):
    # MKL's AVX2 branch rounds sqrt correctly on an AVX2 CPU: there torch's AdamW and
    # PortableAdamW must agree bit for bit, a checkpoint of one resuming in the other.
    script = tmp_path / "parity.py"
    script.write_text(PARITY)
    env = {**RECIPE_ENV, "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "PYTHONPATH": str(REPO)}
    proc = run_python(str(script), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result["sqrt_exact"]:
        pytest.skip("torch's sqrt is not correctly rounded under MKL_CBWR=AVX2 on this CPU")
    assert result["portable"] == result["torch"]
    assert result["mixed"] == result["torch"]
