"""The Megatron contract's checks that need no NeMo-RL (docs/contracts.md)."""

from __future__ import annotations

import pytest

from darling_nemo.rehearsal.contract_megatron import (
    ContractError,
    check_keys,
    check_pipeline,
    check_precision,
    keys_read,
)


def test_keys_read_finds_every_access_form() -> None:
    source = (
        'a = cfg["megatron_cfg"]["tensor_model_parallel_size"]\n'
        'b = self.cfg["megatron_cfg"].get("fp8_cfg", None)\n'
        'if "layernorm_epsilon" in self.cfg["megatron_cfg"]: pass\n'
        'c = megatron_config["expert_model_parallel_size"]\n'
        'd = cfg["dtensor_cfg"]["cpu_offload"]\n'  # another section: not a megatron key
    )
    assert keys_read(source) == {
        "tensor_model_parallel_size",
        "fp8_cfg",
        "layernorm_epsilon",
        "expert_model_parallel_size",
    }


def test_misspelt_key_is_named() -> None:
    with pytest.raises(ContractError, match=r"policy\.megatron_cfg\.tensor_parallel_size:"):
        check_keys({"tensor_parallel_size": 2, "enabled": True}, {"enabled"})
    check_keys({"enabled": True, "converter_type": "X"}, {"enabled"})  # tolerated


@pytest.mark.parametrize(
    ("layers", "pp", "first", "last", "ok"),
    [
        (80, 4, None, None, True),  # 80 / 4 = 20 per stage
        (80, 3, None, None, False),  # 80 / 3 = 26.67
        (80, 3, 26, 26, True),  # 26 + 28 + 26: the middle stage takes the 28 left
        (80, 3, 27, None, False),  # 80 - 27 = 53 over 2 stages
        (32, 2, None, None, True),
        (28, 1, None, None, True),  # no pipeline: nothing to split
        (10, 2, 4, 4, False),  # no middle stage, 2 layers unplaced
    ],
)
def test_pipeline_split(
    layers: int, pp: int, first: int | None, last: int | None, ok: bool
) -> None:
    cfg = {
        "pipeline_model_parallel_size": pp,
        "num_layers_in_first_pipeline_stage": first,
        "num_layers_in_last_pipeline_stage": last,
    }
    if ok:
        check_pipeline(cfg, layers, "m")
    else:
        with pytest.raises(
            ContractError, match=rf"pipeline_model_parallel_size={pp}: m's {layers}"
        ):
            check_pipeline(cfg, layers, "m")


def test_precision_against_optimizer_flags() -> None:
    check_precision("bfloat16", {"bf16": True, "fp16": False})
    check_precision("float32", {"bf16": False, "fp16": False})
    with pytest.raises(ContractError, match=r"optimizer\.bf16=True disagrees .*'float16'"):
        check_precision("float16", {"bf16": True, "fp16": True})
    with pytest.raises(ContractError, match=r"policy\.precision='fp8'"):
        check_precision("fp8", {})
