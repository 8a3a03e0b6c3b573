"""slurm/export_hf.sub and slurm/compare.sub in --dry-run against the fake SLURM of
test_slurm.py: every command printed (and none run: its `srun` fails the test if called),
the printed command lines accepted by the real command-line parsers."""

from __future__ import annotations

import pytest
from test_cli import recipe_main
from test_slurm import cluster, commands, srun_parts  # noqa: F401 (cluster: a fixture)

from darling_nemo import export
from darling_nemo.evals.compare import evals_of


def test_export_hf_dry_run_prints_one_export_per_run(cluster, capsys):  # noqa: F811
    runs = [str(cluster.path / "results" / r) for r in ("darling", "grpo")]
    env = cluster.job("export_hf.sub", nodes=1, RUNS=" ".join(runs), STEP="200")
    res = cluster.run("export_hf.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    steps = [srun_parts(argv) for argv in commands(res.stdout)]
    assert [cmd for _, _, cmd in steps] == [
        ["python", "-m", "darling_nemo.export", run, "--step", "200"] for run in runs
    ]
    assert {node for _, node, _ in steps} == {"gpu-001"}
    # The printed command line is the export's own: its parser takes it, and the run (not
    # created here) is what it refuses.
    assert export.main(steps[0][2][3:]) == 2
    assert (
        capsys.readouterr().err
        == f"export: run {runs[0]}: no such folder (give RESULTS_DIR/RUN_NAME)\n"
    )

    missing = cluster.run("export_hf.sub", cluster.job("export_hf.sub", 1), "--dry-run")
    assert missing.returncode == 2 and "RUNS" in missing.stderr


@pytest.mark.parametrize("task", ["math", "wildchat"])
def test_compare_dry_run_exports_every_run_then_compares(cluster, task, capsys):  # noqa: F811
    runs = [str(cluster.path / "results" / r) for r in ("darling", "grpo")]
    env = cluster.job("compare.sub", nodes=1, RUNS=" ".join(runs), TASK=task)
    extra = "--set=creative:judge.base_url=http://judge:8000/v1"
    res = cluster.run("compare.sub", env, "--dry-run", extra)
    assert res.returncode == 0, res.stderr
    steps = [srun_parts(argv) for argv in commands(res.stdout)]
    assert len(steps) == 4  # the task's benchmarks, two exports, then the comparison
    assert steps[0][2] == ["python", "-m", "darling_nemo.evals.compare", task]
    assert {f"{name}={config}" for name, config in evals_of(task).items()} <= set(
        res.stdout.splitlines()
    )  # the registry answered, here
    steps = steps[1:]
    for (_, _, cmd), run in zip(steps, runs, strict=False):
        assert cmd == ["python", "-m", "darling_nemo.export", run, "--step", "latest"]
    cmp = steps[2][2]
    recipe = cmp.index("uv")
    out = str(cluster.path / "results" / "compare" / "grpo")
    assert cmp[recipe:] == [
        "uv", "run", "recipes/compare_runs.py", *runs, "--task", task, "--step", "latest",
        "--out", out, extra,
    ]  # fmt: skip
    assert "DARLING_DATA_DIR=/opt/darling-nemo/data" in cmp
    assert f"report: {out}/report/report.md" in res.stdout
    # compare_runs.py's parser takes the printed arguments (the runs do not exist here).
    compare = recipe_main("compare_runs")
    assert compare([*cmp[recipe + 3 :], "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith(f"compare_runs: run {runs[0]}: no such folder")

    bad = cluster.run("compare.sub", {**env, "TASK": "poetry"}, "--dry-run")
    assert bad.returncode == 2
    assert "TASK=poetry: no evaluations for this task (tasks with evaluations: " in bad.stderr


@pytest.mark.parametrize(
    ("script", "schema", "config"),
    [
        ("eval_math.sub", "MathEvalConfig", "conf/eval/math.yaml"),
        ("eval_noveltybench.sub", "NoveltyBenchConfig", "conf/eval/noveltybench.yaml"),
    ],
)
def test_eval_jobs_take_a_run_and_export_it_first(cluster, script, schema, config):  # noqa: F811
    from helpers import REPO

    from darling_nemo.config import load_validated
    from darling_nemo.evals import schema as schemas

    run = str(cluster.path / "results" / "qwen-darling")
    env = cluster.job(script, nodes=1, RUN=run, STEP="120")
    res = cluster.run(script, env, "--dry-run")
    assert res.returncode == 0, res.stderr
    steps = [srun_parts(argv) for argv in commands(res.stdout)]
    assert steps[0][2] == ["python", "-m", "darling_nemo.export", run, "--step", "120"]
    for _, _, cmd in steps[1:]:
        recipe = cmd.index("uv")
        overrides = cmd[recipe + 5 :]
        assert overrides[:2] == [f"run={run}", "step=120"]
        cfg, _ = load_validated(REPO / config, overrides, getattr(schemas, schema))
        assert (cfg.run, cfg.step, cfg.generator.model) == (run, 120, None)
        assert cfg.run_name == "qwen-darling-step_120"
        assert f"results/eval/qwen-darling-step_120/{config.split('/')[-1][:-5]}" in cfg.output_dir

    both = cluster.run(script, {**env, "MODEL": "/ckpt/x"}, "--dry-run")
    assert both.returncode == 2 and "set MODEL (a Hugging Face model) or RUN" in both.stderr
    neither = {k: v for k, v in env.items() if k not in ("RUN", "MODEL")}
    res = cluster.run(script, neither, "--dry-run")
    assert res.returncode == 2 and "MODEL is not set (nor RUN)" in res.stderr
