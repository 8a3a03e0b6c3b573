"""`--smoke` (darling_nemo/smoke): the job on its GPUs for 3 steps, checked like the rehearsal.

The pure parts (its overrides, the data subset, the memory report, the comparison with the
plan, the times and the judge's share) run everywhere. The smoke itself runs here through
the rehearsal's stand-ins (marked `nemo_rl`): ONE smoke of the cheapest config that
validates and resumes, whose report is then re-read with a memory report over the plan, and
ONE smoke whose checkpoint is broken between the runs (it must fail at run 2).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest
from helpers import REPO, SMOKE_CONFIG, run_python

from darling_nemo.config import load_config
from darling_nemo.plan.estimate import STANDARD_GPUS, make_plan
from darling_nemo.plan.terms import GIB, Phase, Term
from darling_nemo.schema import ConfigError
from darling_nemo.smoke import report
from darling_nemo.smoke.run import smoke_overrides, train_subset

# ---------------------------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------------------------


def test_smoke_changes_only_data_steps_and_folders():
    cfg = load_config(REPO / "conf/math_qwen3_4b_darling.yaml")
    changes = dict(smoke_overrides(cfg, Path("/s"), Path("/s/train.jsonl")))
    assert changes == {
        "data.train_data_path": "/s/train.jsonl",
        "checkpointing.checkpoint_dir": "/s/checkpoints",
        "logger.log_dir": "/s/logs",
        "grpo.val_period": 2,  # 25 -> 2: run 1 validates at its last step
        "grpo.max_val_samples": 32,  # 96 -> one batch of val_batch_size 32
    }
    # WildChat does not validate (val_period 0): nothing of validation changes
    wildchat = load_config(REPO / "conf/wildchat_llama8b_darling.yaml")
    keys = {k for k, _ in smoke_overrides(wildchat, Path("/s"), Path("/s/t.jsonl"))}
    assert keys == {"data.train_data_path", "checkpointing.checkpoint_dir", "logger.log_dir"}


def test_train_subset_takes_the_first_prompts_and_refuses_too_few(tmp_path):
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps({"input": f"q{k}"}) + "\n" for k in range(5)))
    out = train_subset(str(source), tmp_path / "subset.jsonl", 3)
    assert [json.loads(line)["input"] for line in out.read_text().splitlines()] == [
        "q0",
        "q1",
        "q2",
    ]
    with pytest.raises(ConfigError, match=r"5 prompts; the smoke's 3 steps need 6"):
        train_subset(str(source), tmp_path / "subset.jsonl", 6)
    with pytest.raises(ConfigError, match=r"data.train_data_path=.*not a file"):
        train_subset(str(tmp_path / "missing.jsonl"), tmp_path / "subset.jsonl", 3)


def test_memory_report_keeps_each_phases_largest_peak_and_names_a_bad_line(tmp_path):
    path = tmp_path / "memory.jsonl"
    rows = [("training", 1, 40.0), ("logprobs", 1, 30.0), ("training", 2, 42.5)]
    path.write_text(
        "".join(json.dumps({"phase": p, "step": s, "peak_gib": g}) + "\n" for p, s, g in rows)
    )
    assert report.read_memory_report(path) == {"training": 42.5, "logprobs": 30.0}
    path.write_text('{"phase": "training", "peak_gib": 1}\n{"phase": "training"}\n')
    with pytest.raises(ConfigError, match=r"memory.jsonl:2: expected a JSON object"):
        report.read_memory_report(path)


def gib_term(label: str, gib: float) -> Term:
    return Term(label, "", gib * GIB)


def test_plan_comparison_by_hand_warns_past_15_percent():
    phases = [
        # torch-allocated: 10 + 10 = 20 GiB (runtime and the sleeping vLLM are outside torch)
        Phase(
            "training",
            "PP 1",
            [
                gib_term("parameters", 10),
                gib_term("gradients", 10),
                gib_term("Megatron runtime", 2.1),
                gib_term("vLLM asleep", 2.6),
            ],
        ),
        Phase("logprobs", "last stage", [gib_term("parameters", 8)]),
        Phase("generation", "vLLM", [gib_term("vLLM claim", 47.8)]),  # not measured: no row
    ]
    rows = report.compare(phases, {"training": 23.5, "logprobs": 8.4})
    # training (23.5 - 20) / 20 = +17.5% > 15%; logprobs (8.4 - 8) / 8 = +5%
    assert [(r.phase, r.plan_gib) for r in rows] == [("training", 20.0), ("logprobs", 8.0)]
    assert rows[0].difference == pytest.approx(0.175)
    assert rows[1].difference == pytest.approx(0.05)
    lines = report.memory_lines(rows, "test")
    assert any(line.split()[:4] == ["training", "20.00", "23.50", "+18%"] for line in lines)
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: training measured 23.50 GiB")
    # a phase the report lacks is shown, never guessed
    rows = report.compare(phases, {"training": 20.0})
    assert rows[1].measured_gib is None and not rows[1].off
    assert "not measured" in report.memory_lines(rows, "test")[-1]


def test_judge_share_beside_the_simulated_figure():
    scalars = {
        "timing/train/total_step_time": {2: 50.0},
        "timing/train/darling_judge": {2: 10.0},
        "timing/train/generation": {2: 30.0},
        "timing/train/prepare_for_generation/transfer": {2: 1.0},  # a sub-timer: left out
        "timing/train/valid_tokens_per_sec_per_gpu": {2: 19.6},  # a rate: left out
    }
    lines = report.time_lines(scalars, 2, "math", "overlap+stream")
    # 10 / (50 - 10) = 25.0%; the simulated math overlap+stream overhead is 22.0%
    assert lines[-1].endswith(
        "= 25.0% overhead (darling_judge / rest of the step); simulated 22.0% "
        "(docs/judge-cost.md, math, overlap+stream, 8 classifier GPUs)"
    )
    assert [line.split()[0] for line in lines[1:-1]] == [
        "total_step_time",
        "generation",
        "darling_judge",
    ]
    assert report.judge_mode(overlap=False, streamed=True) == "sync"
    # the chat task's figure is the benchmark's wildchat setting's; a task without one: none
    assert report.simulated_judge_overhead("chat", "sync") == 0.144
    assert report.simulated_judge_overhead("reward_funcs", "sync") is None


def test_the_plans_training_phase_is_compared_without_its_fixed_terms():
    cfg = load_config(REPO / "conf/math_qwen3_4b_darling.yaml")
    plan = make_plan(cfg, STANDARD_GPUS["80 GB (H100)"])
    training = next(p for p in plan.phases if p.name == "training")
    # docs/memory-plan.md's 4B training total less Megatron runtime 2.10 and vLLM asleep 2.60
    assert report.torch_allocated(training) == pytest.approx(training.total / GIB - 4.7)


def smoke_command(tmp_path: Path, *args: str):
    return run_python(
        "recipes/darling_math.py",
        "--config",
        "conf/math_qwen3_1p7b_1node_darling.yaml",
        "--smoke",
        "--smoke-dir",
        str(tmp_path / "smoke"),
        *args,
        timeout=300,
    )


def test_a_smoke_folder_with_checkpoints_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "smoke" / "checkpoints" / "step_3").mkdir(parents=True)
    proc = smoke_command(tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith(
        f"smoke: FAIL at prepare: --smoke-dir {tmp_path / 'smoke'}: its checkpoints/ already "
        "holds steps"
    )
    assert "phase contract" not in proc.stdout


def test_a_smoke_without_nemo_rl_says_how_to_run_it(tmp_path):
    if importlib.util.find_spec("nemo_rl") is not None:
        pytest.skip("NeMo-RL is importable here")
    data = REPO / "conf/local/data/aime25_first8.jsonl"  # 8 prompts: 3 steps of 2
    proc = smoke_command(tmp_path, f"data.train_data_path={data}", "grpo.num_prompts_per_step=2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("smoke: FAIL at prepare: engine: nemo_rl needs NeMo-RL v0.4.0"), last
    assert "darling-nemo container" in proc.stdout  # how to run it, above the verdict
    saved = json.loads((tmp_path / "smoke" / "smoke_report.json").read_text())
    assert saved["verdict"] == last


# ---------------------------------------------------------------------------------------------
# The smoke through the rehearsal's stand-ins (NeMo-RL v0.4.0 importable)
# ---------------------------------------------------------------------------------------------

CONFIG = SMOKE_CONFIG  # one node, validates, resumes: cheapest


def standin_report(path: Path, scale: float) -> Path:
    """A stand-in memory report: the plan's torch-allocated figure of each measured phase
    for CONFIG, times `scale` (the stand-ins compute on CPU and have no GPU peaks)."""
    plan = make_plan(load_config(REPO / CONFIG), STANDARD_GPUS["80 GB (H100)"])
    rows = report.compare(plan.phases, {})
    path.write_text(
        "".join(
            json.dumps({"phase": r.phase, "step": 1, "peak_gib": r.plan_gib * scale}) + "\n"
            for r in rows
        )
    )
    return path


def smoke_in_process(smoke_dir: Path, memory: Path, break_resume: bool = False):
    """`smoke()` with the stand-ins (not a command-line option: tests only)."""
    # NeMo-RL's setup() reads the dataloader's state first when it resumes: without it run 2
    # fails at once, before its workers start (cheaper in CI than a broken weights folder)
    hook = (
        "lambda ckpts: (ckpts / 'step_2' / 'train_dataloader.pt').unlink()"
        if break_resume
        else "None"
    )
    code = (
        "import sys; from pathlib import Path; from darling_nemo.smoke.run import smoke; "
        f"sys.exit(smoke(Path('recipes/darling_math.py').resolve(), {CONFIG!r}, [], 'math', "
        f"Path({str(smoke_dir)!r}), Path({str(memory)!r}), standins=True, before_run_2={hook}))"
    )
    proc = run_python("-c", code, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=1500)
    out = proc.stdout + proc.stderr
    print(out[-4000:])
    return proc.returncode, out


def verdict(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("smoke: ")]
    return lines[-1] if lines else "(no verdict line)"


@pytest.fixture(scope="module")
def passed_smoke(tmp_path_factory):
    pytest.importorskip("nemo_rl")
    base = tmp_path_factory.mktemp("smoke")
    memory = standin_report(base / "memory_within.jsonl", 1.05)
    rc, out = smoke_in_process(base / "smoke", memory)
    return base, rc, out


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_smoke_passes_with_the_standins(passed_smoke):
    base, rc, out = passed_smoke
    assert verdict(out).startswith("smoke: PASS"), verdict(out)
    assert rc == 0
    for phase in ("contract (megatron)", "prepare", "run 1", "run 2"):
        assert any(
            line.startswith(f"phase {phase}") and "PASS" in line for line in out.splitlines()
        )
    # CI's rehearsal path of a recipe that starts its own classifier server (test_rehearsal.py):
    # each run's recipe started the stand-in server and stopped it
    for run in ("run1.log", "run2.log"):
        log = (base / "smoke" / run).read_text()
        assert "classifier server: " in log and "darling_nemo.classify_server" in log, run
        assert "classifier server: stopped" in log, run
    # what it changed is printed, as the rehearsal prints its shrink
    assert "smoke grpo.max_num_steps:" in out and "-> 2 (run 1), 3 (run 2)" in out
    assert re.search(r"smoke checkpointing.checkpoint_dir: .* -> '.*/smoke/checkpoints'", out)
    # 5% over the plan: the table, no warning
    assert re.search(r"^  training .* \+5%$", out, re.M), out
    assert "warning:" not in out
    assert "judge share: darling_judge" in out
    assert "valid_tokens_per_sec_per_gpu" not in out  # a rate, not a phase time
    saved = json.loads((base / "smoke" / "smoke_report.json").read_text())
    assert saved["verdict"].startswith("smoke: PASS")
    assert {row["phase"] for row in saved["memory"]} == {"training", "logprobs"}
    assert saved["step_2_times_s"]["total_step_time"] > 0
    assert (base / "smoke" / "checkpoints" / "step_3" / "policy" / "weights").is_dir()


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_a_report_over_the_plan_is_warned_of(passed_smoke):
    # The same smoke's logs, read again with a report 40% over the plan (the report is the
    # smoke's input: no second smoke is needed to see its comparison)
    base, rc, _ = passed_smoke
    assert rc == 0
    from darling_nemo.smoke.run import plan_lines

    over = standin_report(base / "memory_over.jsonl", 1.4)
    lines, data = plan_lines(load_config(REPO / CONFIG), over, base / "none.jsonl")
    assert [round(row["difference"], 2) for row in data] == [0.4, 0.4]
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 2 and "(+40%, more than 15% off)" in warnings[0]


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_a_smoke_whose_resume_fails_says_run_2(tmp_path):
    pytest.importorskip("nemo_rl")
    memory = standin_report(tmp_path / "memory.jsonl", 1.0)
    rc, out = smoke_in_process(tmp_path / "smoke", memory, break_resume=True)
    assert verdict(out).startswith("smoke: FAIL at run 2"), verdict(out)
    assert "train_dataloader.pt" in verdict(out)
    assert rc == 1
    assert any(line.startswith("phase run 1") and "PASS" in line for line in out.splitlines())
    saved = json.loads((tmp_path / "smoke" / "smoke_report.json").read_text())
    assert saved["verdict"] == verdict(out)
