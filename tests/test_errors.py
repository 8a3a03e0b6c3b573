"""Every command ends on bad input the same way: one line on stderr naming the key, file:line
or path, exit code 2, nothing written; Ctrl-C ends with one line and exit code 130.

Each case runs the real command in a fresh interpreter, as a user would; each fails before any
model loads, so the whole file takes seconds per case."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
from helpers import HANG_GUARD_S, RECIPE_ENV, run_python, start_recipe_as_from_a_terminal

from darling_nemo.manifest import check


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


@pytest.fixture
def bad_inputs(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "nokey.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"q": "2+2?"}\n')
    (tmp_path / "types.jsonl").write_text(
        '{"question": "1+1?", "answer": "2"}\n{"question": 42, "answer": null}\n'
    )
    rows = [{"question": f"{k}+1?", "answer": str(k + 1)} for k in range(8)]
    (tmp_path / "array.jsonl").write_text(json.dumps(rows, indent=2))
    (tmp_path / "torn.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"question": \n')
    (tmp_path / "group.jsonl").write_text(
        '{"prompt": "2+2?", "responses": ["4"], "quality": [1]}\n'
    )
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "a-model").mkdir()  # a folder that exists: the model check passes it
    return tmp_path


MATH_TRL = ("recipes/darling_math.py", "--config", "conf/local/math_trl.yaml")
PLAN = ("-m", "darling_nemo.plan", "conf/wildchat_llama70b_darling.yaml")
SCORE = ("-m", "darling_nemo.score", "{d}/group.jsonl")
CLASSIFIER = ("recipes/train_classifier.py", "--config", "conf/classifier/minilm_noveltybench.yaml")
PREP_MATH = (
    "-c",
    "import sys; from darling_nemo.data_prep import main_math; sys.exit(main_math())",
    "conf/local/data/aime25_first8.jsonl",
)
NO_MODEL = "(a local checkpoint must exist; a hub model is named org/name)"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (  # an empty data file: named, with what to do
            (*MATH_TRL, "task.data_path={d}/empty.jsonl", "output_dir={d}/run"),
            "task.data_path: {d}/empty.jsonl has 0 row(s), and task.heldout_prompts=2 leaves "
            "none to train on",
        ),
        (  # a JSONL without the question key: file, row and the key to set
            (*MATH_TRL, "task.data_path={d}/nokey.jsonl", "output_dir={d}/run"),
            "{d}/nokey.jsonl:2: no 'question' (set task.question_key to one of ['q'])",
        ),
        (  # a question that is not text: file:line, the key and the type (trained silently)
            (*MATH_TRL, "task.data_path={d}/types.jsonl", "output_dir={d}/run"),
            "{d}/types.jsonl:2: 'question' is a number (42), not a string (task.question_key)",
        ),
        (  # a pretty-printed JSON array: one line saying so (was 42 "not valid JSON" lines)
            (*MATH_TRL, "task.data_path={d}/array.jsonl", "output_dir={d}/run"),
            "task.data_path: {d}/array.jsonl is a JSON array; JSONL wants one object per line",
        ),
        (  # output_dir that is a file
            (*MATH_TRL, "output_dir={d}/afile"),
            "output_dir: {d}/afile is a file, not a folder",
        ),
        (  # output_dir that cannot be made (a file on its path; root may write anywhere else)
            (*MATH_TRL, "output_dir={d}/afile/run"),
            "output_dir: {d}/afile/run lies under {d}/afile, which is a file, not a folder",
        ),
        (  # a folder that takes no new folder, whatever the permission bits say (root too)
            (*MATH_TRL, "output_dir=/proc/darling-run"),
            "darling_math: conf/local/math_trl.yaml: output_dir: cannot write in /proc",
        ),
        (  # a line that is not JSON: file and line, on one line
            (*MATH_TRL, "task.data_path={d}/torn.jsonl", "output_dir={d}/run"),
            "task.data_path: {d}/torn.jsonl:2: not valid JSON",
        ),
        (  # a policy folder that does not exist: named by key, before any model loads
            (
                *MATH_TRL,
                "policy={{kind: pretrained, name_or_path: {d}/no-such-model}}",
                "output_dir={d}/run",
            ),
            f"policy.name_or_path: no such model folder {{d}}/no-such-model {NO_MODEL}",
        ),
        (  # a number that is not one: one line naming the key (was 'invalid config:' + a line)
            (*MATH_TRL, "trainer.max_steps=abc", "output_dir={d}/run"),
            "darling_math: conf/local/math_trl.yaml: trainer.max_steps: must be a whole number, "
            "got 'abc'",
        ),
        (  # a string for a size
            (*PLAN, "policy.megatron_cfg.tensor_model_parallel_size=three"),
            "darling-plan: policy.megatron_cfg.tensor_model_parallel_size: expected a whole "
            "number >= 1, got 'three'",
        ),
        (  # a negative GPU size
            (*PLAN, "--gpu-memory", "-5"),
            "darling-plan: --gpu-memory: a GPU's memory in GiB must be > 0, got -5",
        ),
        (  # a file the plan writes, under a file
            (*PLAN, "--layout-env", "{d}/afile/layout.env"),
            "darling-plan: --layout-env: {d}/afile/layout.env lies under {d}/afile, which is a "
            "file, not a folder",
        ),
        (  # an eval's output folder that is a file (its model folder exists)
            (
                "recipes/eval_math.py",
                "--config",
                "conf/eval/math_tiny.yaml",
                "generator.model={d}/a-model",
                "output_dir={d}/afile",
            ),
            "eval_math: output_dir: {d}/afile is a file, not a folder",
        ),
        (  # a local model folder that does not exist: not the hub's "Repo id" hint
            (
                "recipes/eval_math.py",
                "--config",
                "conf/eval/math_tiny.yaml",
                "generator.model={d}/no-such-model",
                "output_dir={d}/eval",
            ),
            "generator.model: no such model folder {d}/no-such-model",
        ),
        (  # the miniature's config errors: exit 2 like every other command (was 1)
            ("recipes/darling_mini.py", "trainer.max_steps=abc", "output_dir={d}/mini"),
            "trainer.max_steps: must be a whole number, got 'abc'",
        ),
        (  # the classifier's base model: a folder that does not exist
            (*CLASSIFIER, "base_model={d}/no-such-model", "output_dir={d}/clf"),
            f"train_classifier: base_model: no such model folder {{d}}/no-such-model {NO_MODEL}",
        ),
        (  # the classifier's output folder that is a file
            (*CLASSIFIER, "output_dir={d}/afile"),
            "train_classifier: output_dir: {d}/afile is a file, not a folder",
        ),
        (  # darling-score's judge model: a folder that does not exist (was the hub's hint)
            (*SCORE, "--judge", "cross_encoder", "--judge-set", "model={d}/no-such-model"),
            f"darling-score: judge.model: no such model folder {{d}}/no-such-model {NO_MODEL}",
        ),
        (  # darling-score's output file under a file
            (*SCORE, "-o", "{d}/afile/scored.jsonl"),
            "darling-score: --output: {d}/afile/scored.jsonl lies under {d}/afile",
        ),
        (  # data prep's output file under a file
            (*PREP_MATH, "--out", "{d}/afile/math.jsonl"),
            "darling-prep-math: --out: {d}/afile/math.jsonl lies under {d}/afile",
        ),
        (  # --smoke on a TRL config: what the TRL path offers instead
            (*MATH_TRL, "--smoke", "output_dir={d}/run"),
            "darling_math: conf/local/math_trl.yaml: --smoke is for engine: nemo_rl configs; a "
            "TRL config runs as it is, on this machine: uv run recipes/darling_math.py --config "
            "conf/local/math_trl.yaml trainer.max_steps=2 is its smoke run",
        ),
        (  # data prep's counts: a whole number >= 1 (-3 kept all rows but the last 3)
            (*PREP_MATH, "--out", "{d}/math.jsonl", "--limit", "-3"),
            "darling-prep-math: error: argument --limit: expected a whole number >= 1, got -3",
        ),
    ],
    ids=[
        "empty-data",
        "missing-key",
        "data-wrong-type",
        "data-json-array",
        "output-dir-is-file",
        "output-dir-unmakeable",
        "output-dir-not-writable",
        "data-not-json",
        "trl-missing-model",
        "trl-bad-number",
        "plan-size-string",
        "plan-negative-gpu",
        "plan-output-under-file",
        "eval-output-dir-is-file",
        "eval-missing-model",
        "mini-bad-number",
        "classifier-missing-model",
        "classifier-output-dir-is-file",
        "score-missing-model",
        "score-output-under-file",
        "prep-output-under-file",
        "smoke-on-trl",
        "prep-bad-number",
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(bad_inputs, args, expected):
    before = sorted(p.name for p in bad_inputs.iterdir())
    proc = run_python(*(a.format(d=bad_inputs) for a in args), env=RECIPE_ENV, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert expected.format(d=bad_inputs) in last_line(proc.stderr), proc.stderr[-2000:]
    if "error: argument" not in expected:  # argparse's own: the usage, then its one line
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert sorted(p.name for p in bad_inputs.iterdir()) == before  # no run folder, no config


def test_rehearse_outside_the_nemo_rl_environment_says_what_to_run():
    if importlib.util.find_spec("nemo_rl") is not None:
        pytest.skip("NeMo-RL is importable here: the rehearsal would run")
    # (No check of /tmp for a rehearsal folder left: CI's NeMo-RL sessions make such folders
    # at the same time, so a new one there is not this command's; the refusal comes before
    # rehearse(), which alone makes one.)
    proc = run_python(
        "recipes/darling_math.py",
        "--config",
        "conf/math_qwen3_4b_darling.yaml",
        "--rehearse",
        env=RECIPE_ENV,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "darling_math: --rehearse runs NeMo-RL's own loop, and NeMo-RL is not installed in this "
        f"environment ({sys.executable}): run .nemo-rl-cpu/bin/python recipes/darling_math.py "
        "--config conf/math_qwen3_4b_darling.yaml --rehearse (the environment is made once by "
        "containers/nemo_rl_cpu_env.sh; docs/rehearsal.md)"
    ]


def test_a_corrected_rerun_is_not_refused_after_a_failed_data_check(bad_inputs):
    """The failed run wrote no config.yaml, so the same output_dir takes the corrected run's
    settings (its check then fails on the next bad input, not on 'other settings')."""
    out = f"output_dir={bad_inputs}/run"
    first = run_python(
        *MATH_TRL, f"task.data_path={bad_inputs}/empty.jsonl", out, env=RECIPE_ENV, timeout=300
    )
    assert first.returncode == 2
    assert not (bad_inputs / "run").exists()
    second = run_python(
        *MATH_TRL, f"task.data_path={bad_inputs}/nokey.jsonl", out, env=RECIPE_ENV, timeout=300
    )
    assert second.returncode == 2
    assert "other settings" not in second.stderr
    assert "no 'question'" in last_line(second.stderr)


# A TRL run long enough to be stopped, light to start: no judge model to load, short answers,
# a checkpoint every step.
TRL_LONG_RUN = (
    *MATH_TRL,
    "output_dir={d}",
    "trainer.max_steps=1000",
    "trainer.save_steps=1",
    "trainer.max_completion_length=8",
    "darling.judge={{kind: lexical}}",
    "logging.report_to=[]",
)
TRL_RUN_KEPT = (
    r"stopped after step (\d+) of 1000; the last complete checkpoint is checkpoint-(\d+) in "
    r"{d}; the same command resumes from it"
)


@pytest.mark.parametrize(
    ("args", "started", "sig", "expected"),
    [
        (  # the miniature, during a warm start
            (
                "recipes/darling_mini.py",
                "output_dir={d}",
                "seeds=[3]",
                "warm_start.steps=100000",  # long enough to be interrupted in the middle
            ),
            "seed-3/warm_start.partial",  # written there, renamed when whole
            signal.SIGINT,
            re.escape(
                "darling_mini: interrupted (Ctrl-C); finished warm starts and arms and each "
                "unfinished arm's newest checkpoint are saved in output_dir; the same command "
                "resumes from them"
            ),
        ),
        (  # a TRL run (recipe.py's own path), once its first checkpoint is saved
            TRL_LONG_RUN,
            "checkpoint-*",
            signal.SIGINT,
            r"darling_math: interrupted \(Ctrl-C\); " + TRL_RUN_KEPT,
        ),
        (  # the same under SIGTERM (scancel, a preemption), sent as a save begins
            TRL_LONG_RUN,
            ".saving/checkpoint-[!1]*",  # checkpoint-1 is whole by then
            signal.SIGTERM,
            r"darling_math: interrupted \(SIGTERM\); " + TRL_RUN_KEPT,
        ),
    ],
    ids=["mini", "trl-recipe", "trl-recipe-sigterm"],
)
def test_ctrl_c_or_sigterm_is_one_line_saying_what_is_kept(tmp_path, args, started, sig, expected):
    """SIGINT (SIGTERM) while training (`expected`: a regular expression), progress bars on: no traceback, the last line says
    what is kept and that the same command resumes, exit code 130 (143): 128 + the signal.
    A save that SIGTERM interrupts is discarded whole; every checkpoint left is intact."""
    env = {**RECIPE_ENV, "PYTHONUNBUFFERED": "1"}
    proc = start_recipe_as_from_a_terminal(
        [a.format(d=tmp_path) for a in args], env, stdout=subprocess.DEVNULL
    )
    try:
        # Polls until training has begun (the config and the data were accepted); the bound
        # only stops a test whose command never starts, a loaded machine is far inside it.
        polls = 0
        while not any(tmp_path.glob(started)):
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            polls += 1
            assert polls < 60000, f"the command never reached {started}"
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.01)
        os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    kept = re.fullmatch(expected.format(d=re.escape(str(tmp_path))), last_line(stderr))
    assert kept, last_line(stderr)
    if "checkpoint" in started:  # the step reached is at or past the last checkpoint
        reached, saved = map(int, kept.groups())
        assert reached >= saved >= 1
        assert not list(tmp_path.glob(".saving/*"))
        assert all(check(p).problem is None for p in tmp_path.glob("checkpoint-*"))


SWALLOWED = """
import os, signal, sys, time
from darling_nemo import interrupt
interrupt.quiet_start("__main__", "t")
interrupt.started()
interrupt.stop_if_interrupted()  # nothing received yet: no effect
try:  # a library that drops the KeyboardInterrupt raised inside it
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(5)  # (the signal's KeyboardInterrupt ends the sleep at once)
except KeyboardInterrupt:
    pass
try:
    interrupt.stop_if_interrupted()
except KeyboardInterrupt as err:
    interrupt.interrupt_reported()  # said once: a later run in this process is not stopped
    interrupt.stop_if_interrupted()
    sys.exit(43 if isinstance(err, interrupt.Terminated) else 42)
"""


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 42), ("SIGTERM", 43)])
def test_a_swallowed_interrupt_still_stops_the_next_step(sig, code):
    """A Ctrl-C (SIGTERM) whose KeyboardInterrupt a library dropped is raised again at the
    next step of a long loop (`stop_if_interrupted`), as itself; once reported, it stops
    nothing else in the process."""
    proc = subprocess.run(  # Ctrl-C as from a terminal (CI's background shell ignores it)
        [sys.executable, "-c", SWALLOWED, sig],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.returncode == code, proc.stderr


def test_an_unreachable_served_judge_stops_a_trl_run_before_it_starts(tmp_path):
    """The TRL engine probes a served judge at start-up as the NeMo-RL path does: the
    endpoint is named by key and URL, exit 2, nothing written."""
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    proc = run_python(
        *MATH_TRL,
        f"darling.judge={{kind: served, endpoints: ['{url}']}}",
        f"output_dir={tmp_path}/run",
        env=RECIPE_ENV,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"darling.judge.endpoints[0] {url}: connection refused" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_the_ngram_ablation_builds_no_judge_and_probes_nothing(tmp_path):
    """diversity: ngram never asks the judge, so an unreachable served judge is not probed
    and the run goes on to its next check (here: a data file with no rows)."""
    (tmp_path / "empty.jsonl").write_text("")
    proc = run_python(
        *MATH_TRL,
        "darling.diversity=ngram",
        "darling.judge={kind: served, endpoints: ['http://127.0.0.1:9']}",
        f"task.data_path={tmp_path}/empty.jsonl",
        f"output_dir={tmp_path}/run",
        env=RECIPE_ENV,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "served judge" not in proc.stderr
    assert "has 0 row(s)" in last_line(proc.stderr)
