"""Export of a run's checkpoint to a Hugging Face folder: run folder and step resolution,
the cache, verification and every refusal, against folders laid out as NeMo-RL v0.4.0's
CheckpointManager writes them (checkpoints/step_N/{training_info.json, config.yaml,
policy/weights, policy/optimizer}; tmp_step_N while a save is in progress).

The conversion itself (NeMo-RL's export_model_from_megatron: Megatron-Bridge + Megatron-Core)
does not run here; the converter is injected at its function boundary: `save_converter`
loads the step's weights (a tiny Llama saved with save_pretrained, as the rehearsal's
stand-in workers save them) and writes them with save_pretrained, so every step after the
conversion (verification, marker, cache, evaluation) reads a real exported folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import mount_tmpfs, unmount

from darling_nemo.export import (
    MARKER,
    export_run,
    find_checkpoint,
    main,
    verify_hf,
)
from darling_nemo.schema import ConfigError


def save_converter(calls: list | None = None):
    """A converter with NeMo-RL's signature that re-saves an HF-format weights folder."""

    def convert(model_name: str, weights: Path, out: Path, tokenizer: str, overrides: dict):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if calls is not None:
            calls.append((model_name, weights, out, tokenizer, overrides))
        AutoModelForCausalLM.from_pretrained(weights).save_pretrained(out)
        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(out)

    return convert


def make_run(
    root: Path, lm: Path, steps=(2, 10), backend: str = "megatron", in_progress: int | None = 12
) -> Path:
    """A run folder as NeMo-RL v0.4.0 leaves it (policy weights in HF format, as the
    rehearsal's stand-ins save them)."""
    from transformers import AutoModelForCausalLM

    run = root / "my-run"
    model = AutoModelForCausalLM.from_pretrained(lm)
    config = {
        "policy": {
            "model_name": str(lm),
            "tokenizer": {"name": str(lm)},
            "megatron_cfg": {"enabled": backend == "megatron"},
            "dtensor_cfg": {"enabled": backend == "dtensor"},
        },
        "grpo": {"max_num_steps": max(steps)},
    }
    names = [f"step_{s}" for s in steps] + ([f"tmp_step_{in_progress}"] if in_progress else [])
    for name in names:
        step = run / "checkpoints" / name
        model.save_pretrained(step / "policy" / "weights")
        (step / "policy" / "optimizer").mkdir(parents=True)
        (step / "training_info.json").write_text(json.dumps({"step": int(name.split("_")[-1])}))
        (step / "train_dataloader.pt").write_bytes(b"")  # the dataloader state (unread here)
        (step / "config.yaml").write_text(yaml.safe_dump(config))
    return run


@pytest.fixture
def run_dir(tmp_path, tiny_models, offline):
    return make_run(tmp_path, tiny_models[0])


def test_latest_is_the_highest_finished_step(run_dir):
    # step_10 beats step_2 numerically (not as text: "10" < "2"); tmp_step_12 is a save in
    # progress, not a checkpoint.
    assert find_checkpoint(run_dir).step == 10
    assert find_checkpoint(run_dir / "checkpoints").step == 10
    assert find_checkpoint(run_dir, "2").step_dir == run_dir / "checkpoints" / "step_2"
    assert find_checkpoint(run_dir / "checkpoints" / "step_2").step == 2


def test_export_is_verified_marked_and_cached(run_dir):
    calls: list = []
    ckpt, hf = export_run(run_dir, converter=save_converter(calls), available_bytes=10**15)
    assert hf == run_dir / "checkpoints" / "step_10" / "hf"
    assert len(calls) == 1
    model_name, weights, _, tokenizer, overrides = calls[0]
    assert weights == run_dir / "checkpoints" / "step_10" / "policy" / "weights"
    assert model_name == tokenizer == ckpt.model_name and overrides == {}
    marker = json.loads((hf / MARKER).read_text())
    assert marker["step"] == 10 and marker["run"] == str(run_dir)
    assert not (hf.parent / "hf.partial").exists()

    # Second call: the marked folder is reused, the converter is not called.
    _, again = export_run(run_dir, converter=save_converter(calls), available_bytes=10**15)
    assert again == hf and len(calls) == 1


def test_megatron_iter_folder_is_the_converter_input(run_dir):
    # Megatron's save writes policy/weights/iter_NNNNNNN (the converter's --megatron-ckpt-path).
    weights = run_dir / "checkpoints" / "step_10" / "policy" / "weights"
    for n in (0, 3):
        (weights / f"iter_{n:07d}").mkdir()
    calls: list = []

    def record_only(*args):
        calls.append(args)
        raise RuntimeError("stop after recording")

    with pytest.raises(RuntimeError):
        export_run(run_dir, converter=record_only, available_bytes=10**15)
    assert calls[0][1] == weights / "iter_0000003"


def test_half_done_export_is_redone(run_dir):
    hf = run_dir / "checkpoints" / "step_10" / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{")  # a crash mid-write: no marker
    calls: list = []
    export_run(run_dir, converter=save_converter(calls), available_bytes=10**15)
    assert len(calls) == 1 and (hf / MARKER).is_file()
    verify_hf(hf)


def test_wrong_shapes_are_refused_and_not_marked(run_dir):
    def truncating(model_name, weights, out, tokenizer, overrides):
        from safetensors.torch import load_file, save_file

        save_converter()(model_name, weights, out, tokenizer, overrides)
        tensors = load_file(out / "model.safetensors")
        tensors["model.norm.weight"] = tensors["model.norm.weight"][:-1].clone()
        save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})

    with pytest.raises(ConfigError, match=r"wrong shape weights.*model\.norm\.weight"):
        export_run(run_dir, converter=truncating, available_bytes=10**15)
    assert not (run_dir / "checkpoints" / "step_10" / "hf").exists()


def test_a_full_disk_leaves_no_half_export_and_says_so_in_one_line(run_dir, capsys, monkeypatch):
    # A real full disk: a 64 KiB tmpfs where the export is written (step_10/hf.partial);
    # the tiny model's weights (~0.5 MiB) do not fit.
    partial = run_dir / "checkpoints" / "step_10" / "hf.partial"
    why_not = mount_tmpfs(partial, "64k")
    if why_not:
        pytest.skip(f"cannot mount a tmpfs here: {why_not}")
    import darling_nemo.nemo_rl.export as nemo_export

    monkeypatch.setattr(nemo_export, "megatron_to_hf", save_converter())  # where main finds it
    try:
        code, _, err = _cli(capsys, str(run_dir))
        lines = [line for line in err.splitlines() if line.startswith("export:")]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        err = lines[0]
        assert "disk full: the Hugging Face export hf did not fit in " in err
        assert "step_10 (needs about 0." in err and "the checkpoint itself is untouched" in err
        assert "run the same command again" in err
        assert not list(partial.iterdir())  # the half export was removed, freeing the space
        assert not (run_dir / "checkpoints" / "step_10" / "hf").exists()
    finally:
        unmount(partial)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what building the fixture printed (progress bars)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_errors_are_one_line_exit_2(tmp_path, tiny_models, offline, capsys):
    lm = tiny_models[0]
    empty = tmp_path / "empty-run"
    empty.mkdir()
    code, _, err = _cli(capsys, str(empty))
    assert code == 2 and err.count("\n") == 1
    assert "no checkpoint" in err and "checkpointing.enabled" in err

    run = make_run(tmp_path / "m", lm)
    code, _, err = _cli(capsys, str(run), "--step", "7")
    assert code == 2 and err.count("\n") == 1
    assert "no step 7; its checkpoints are steps 2, 10" in err

    dt = make_run(tmp_path / "d", lm, backend="dtensor")
    code, _, err = _cli(capsys, str(dt))
    assert code == 2 and err.count("\n") == 1
    assert "DTensor" in err and "convert_dcp_to_hf.py" in err and "step_10/hf" in err

    # The tiny model's ~0.1M parameters need the 4 GiB runtime allowance: 1 GiB is refused.
    code, _, err = _cli(capsys, str(run), "--host-memory-gib", "1")
    assert code == 2 and err.count("\n") == 1
    assert "needs ~4 GiB of host memory" in err and "has 1 GiB available" in err
    assert not (run / "checkpoints" / "step_10" / "hf").exists()


def test_cli_outside_the_nemo_rl_image_says_where_to_run(run_dir, capsys):
    try:
        import nemo_rl  # noqa: F401

        pytest.skip("NeMo-RL is installed: the command would convert")
    except ImportError:
        pass
    code, _, err = _cli(capsys, str(run_dir))
    assert code == 2 and err.count("\n") == 1
    assert "needs NeMo-RL v0.4.0 with Megatron-Bridge (missing: nemo_rl)" in err


def test_cli_reuses_a_cached_export(run_dir, capsys):
    export_run(run_dir, "2", converter=save_converter(), available_bytes=10**15)
    code, out, _ = _cli(capsys, str(run_dir), "--step", "2")
    assert code == 0 and out.strip().startswith("reused step 2: ")


# ----------------------------------------------------------------------------- evaluate a run


def test_eval_config_takes_a_run_or_a_model_not_both():
    from darling_nemo.evals.schema import MathEvalConfig
    from darling_nemo.schema import validate_section

    bench = [{"name": "b", "path": "x.jsonl"}]
    base = {"output_dir": "o", "benchmarks": bench}
    ok = validate_section(MathEvalConfig, {**base, "run": "r", "step": 3, "generator": {}})
    assert ok.run == "r" and ok.step == 3 and ok.generator.model is None
    for generator, run in (({"model": "m"}, "r"), ({}, None)):
        raw = {**base, "generator": generator, **({"run": run} if run else {})}
        with pytest.raises(ConfigError, match="exactly one of `run`"):
            validate_section(MathEvalConfig, raw)


def test_unexported_run_says_how_to_export(run_dir):
    # This environment has no NeMo-RL: the evaluation cannot convert, and says what to run.
    pytest.importorskip("transformers")
    try:
        import nemo_rl  # noqa: F401

        pytest.skip("NeMo-RL is installed: the evaluation would convert")
    except ImportError:
        pass
    from darling_nemo.evals.run_source import resolve_run
    from darling_nemo.evals.schema import MathEvalConfig
    from darling_nemo.schema import validate_section

    raw = {"output_dir": "o", "benchmarks": [{"name": "b", "path": "x"}], "generator": {}}
    cfg = validate_section(MathEvalConfig, {**raw, "run": str(run_dir)})
    with pytest.raises(ConfigError, match=r"not exported yet.*python -m darling_nemo.export"):
        resolve_run(cfg)
    export_run(run_dir, converter=save_converter(), available_bytes=10**15)
    resolved = resolve_run(cfg)
    assert resolved.generator.model == str(run_dir / "checkpoints" / "step_10" / "hf")
    assert resolved.run_name == "my-run-step_10"


@pytest.mark.slow
def test_export_evaluate_compare_end_to_end(tmp_path, tiny_models, offline):
    """Two runs (their weights: tiny random Llamas) -> export (converter injected) ->
    compare_runs.py (math and NoveltyBench recipes with run=..., reusing the exports) ->
    report with the runs' config and step, pass@k plot and the quality-vs-diversity plot."""
    from helpers import run_recipe

    lm, rm = tiny_models
    runs = []
    for name in ("darling", "grpo"):
        run = make_run(tmp_path / name, lm, steps=(4,), in_progress=None)
        runs.append(run.rename(tmp_path / name / f"qwen-{name}"))
        export_run(runs[-1], converter=save_converter(), available_bytes=10**15)
    out = tmp_path / "compare"
    proc = run_recipe(
        "compare_runs.py",
        *map(str, runs),
        "--task=math",
        f"--out={out}",
        "--eval=math=conf/eval/math_tiny.yaml",
        "--eval=noveltybench=conf/eval/noveltybench_tiny.yaml",
        "--set=math:max_problems=1",
        "--set=noveltybench:max_prompts=2",
        f"--set=noveltybench:reward_model.model={rm}",
    )
    commands = [x for x in proc.stdout.splitlines() if x.startswith("+ ")]
    assert len(commands) == 2 + 4  # 2 exports (reused), 2 runs x 2 evals
    for name in ("qwen-darling-step_4", "qwen-grpo-step_4"):
        for kind in ("math", "noveltybench"):
            summary = json.loads((out / name / kind / "summary.json").read_text())
            assert summary["run_name"] == name
            assert summary["source"]["step"] == 4
            assert summary["source"]["training_config"].endswith("step_4/config.yaml")
            assert summary["model"].endswith("step_4/hf")
    report = (out / "report" / "report.md").read_text()
    assert "| qwen-darling-step_4 | 4 |" in report and "| qwen-grpo-step_4 | 4 |" in report
    assert (out / "report" / "quality_vs_diversity.png").is_file()
    assert list((out / "report").glob("pass_at_k_*.png"))


def test_compare_dry_run_prints_every_command(run_dir, capsys):
    import runpy
    import sys

    from helpers import REPO

    argv = [str(run_dir), "--task=wildchat", "--out=o", "--dry-run", "--step=2"]
    sys_argv = sys.argv
    sys.argv = ["compare_runs.py", *argv]
    try:
        with pytest.raises(SystemExit) as end:
            runpy.run_path(str(REPO / "recipes" / "compare_runs.py"), run_name="__main__")
    finally:
        sys.argv = sys_argv
    assert end.value.code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"+ export {run_dir}/checkpoints/step_2"
    assert "recipes/eval_noveltybench.py --config conf/eval/noveltybench.yaml" in out[1]
    assert "recipes/eval_creative.py --config conf/eval/creative.yaml" in out[2]
    assert f"run={run_dir} step=2 run_name=my-run-step_2 output_dir=o/my-run-step_2/" in out[2]
    assert not (run_dir / "checkpoints" / "step_2" / "hf").exists()  # nothing ran


def test_host_memory_estimate_from_the_plans_parameter_count():
    from darling_nemo.export import GIB, host_memory_needed

    need, params = host_memory_needed("meta-llama/Llama-3.3-70B-Instruct")
    # Llama-3.3-70B: 80 layers of 855,654,400 (attention 2 x 8192^2 + 2 x 8192 x 1024, MLP
    # 3 x 8192 x 28672, two norms of 8192),
    # embedding and untied head of 128,256 x 8,192 each, final norm 8,192: 70,553,706,496.
    assert params == 80 * 855_654_400 + 2 * 128_256 * 8_192 + 8_192 == 70_553_706_496
    assert need == 70_553_706_496 * 6 + 4 * GIB  # 4 B (fp32 model) + 2 B (bf16 out) + runtime
