"""Math evaluation: grading of tricky answers, problem loading, the summary, and the recipe
end to end on a tiny random Llama (generate -> grade -> summary -> resume)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from helpers import RECIPE_ENV, REPO, run_recipe

from darling_nemo.config import load_config
from darling_nemo.evals.math import (
    Grader,
    grade_response,
    load_problems,
    normalize_answer,
    summarize_math,
)
from darling_nemo.evals.schema import MathBenchmark, MathEvalConfig
from darling_nemo.resources import RESOURCES_DIR
from darling_nemo.schema import ConfigError, validate_section

DATA = RESOURCES_DIR / "math_eval"

# ----------------------------------------------------------------------------- grading

GRADING_CASES = [
    # (reference answer, response, correct?)
    ("\\frac{1}{9}", "so r = \\boxed{1/9}", True),  # a/b vs \frac
    ("\\frac{1}{9}", "The ratio is $\\frac{1}{9}$.", True),  # no box: last LaTeX expression
    ("\\dfrac{3}{4}", "\\boxed{\\frac34}", True),  # \dfrac and the brace-less \frac34
    ("\\frac{1}{9}", "\\boxed{0.111}", False),  # a rounded decimal is not 1/9
    # Several boxes: the last is the answer (math-verify alone reads {3, 5} and fails both).
    ("5", "First \\boxed{3}, wait, actually \\boxed{5}", True),
    ("3", "First \\boxed{3}, wait, actually \\boxed{5}", False),
    ("\\frac{1}{2}", "\\boxed{2} no: \\boxed{\\frac{1}{2}} (\\{1\\} aside)", True),
    ("\\frac{\\sqrt{13}}{2}", "\\boxed{\\sqrt{13}/2}", True),
    ("2^{99}", "\\boxed{2^{99}}", True),
    ("2^{99}", "\\boxed{633825300114114700748351602688}", True),  # the same integer
    ("[2,5)", "x \\in \\boxed{[2, 5)}", True),  # half-open interval
    ("[2,5)", "\\boxed{(2, 5)}", False),  # open is a different interval
    ("(-\\infty, 3]", "\\boxed{(-\\infty,3]}", True),
    ("1,2", "\\boxed{2, 1}", True),  # a set of answers, any order
    ("3375", "\\boxed{3,375}", True),  # thousands separator
    ("70", "\\boxed{70.0}", True),
    ("70", "\\boxed{7}", False),
    ("x=3", "\\boxed{3}", True),  # "x = 3" against its value
    ("-984", "the answer is \\boxed{-984}", True),
    ("-984", "\\boxed{984}", False),  # sign matters
    ("70", "I could not solve it.", False),  # no answer at all
]


@pytest.mark.parametrize(("answer", "response", "correct"), GRADING_CASES)
def test_grading_tricky_answers(answer, response, correct):
    pred, ok = grade_response(response, answer)
    assert ok is correct, (answer, response, pred)


def test_grading_records_what_was_read():
    assert grade_response("\\boxed{\\frac{1}{9}}", "\\frac19")[0] == "\\frac{1}{9}"
    assert grade_response("no number here", "70") == (None, False)


@pytest.mark.slow
def test_grader_pool_agrees_with_inline():
    responses = [r for _, r, _ in GRADING_CASES[:6]]
    inline = Grader(workers=1, timeout_s=5)
    pool = Grader(workers=2, timeout_s=5)  # spawned processes: math-verify's alarm per worker
    try:
        assert pool.grade(responses, "\\frac{1}{9}") == inline.grade(responses, "\\frac{1}{9}")
    finally:
        pool.close()


def test_normalize_answer():
    assert normalize_answer(["$2^{1009}$"]) == "2^{1009}"  # OlympiadBench's list form
    assert normalize_answer(["$3$", "$5$"]) == "3, 5"
    assert normalize_answer(" 70 ") == "70"
    assert normalize_answer(42) == "42"
    assert normalize_answer("$(-\\infty, 0) \\cup\\{1\\}$.") == "(-\\infty, 0) \\cup\\{1\\}"


# ----------------------------------------------------------------------------- problems


def test_other_file_formats_and_keys(tmp_path):
    rows = [
        {"uid": "a", "prompt_text": "1+1?", "gold": "2"},
        {"uid": "b", "prompt_text": "2+2?", "gold": "4"},
    ]
    as_json = tmp_path / "set.json"
    as_json.write_text(json.dumps(rows))
    as_parquet = tmp_path / "set.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), as_parquet)
    for path in (as_json, as_parquet):
        bench = MathBenchmark(
            name="s", path=str(path), question_key="prompt_text", answer_key="gold", id_key="uid"
        )
        assert [(p.key, p.question, p.answer) for p in load_problems(bench)] == [
            ("s/a", "1+1?", "2"),
            ("s/b", "2+2?", "4"),
        ]
    as_csv = tmp_path / "set.csv"
    as_csv.write_text("uid,prompt_text,gold\n")
    with pytest.raises(ConfigError, match=r"set\.csv is not \.jsonl, \.json or \.parquet"):
        load_problems(MathBenchmark(name="s", path=str(as_csv)))


def test_shipped_benchmarks_load():
    counts = {"aime25": 30, "hmmt": 30, "brumo": 30, "olympiadbench": 675}
    for name, count in counts.items():
        problems = load_problems(MathBenchmark(name=name, path=str(DATA / f"{name}.jsonl")))
        assert len(problems) == count
        assert all(p.question and p.answer and "$" not in p.answer[:1] for p in problems)
    first = load_problems(MathBenchmark(name="b", path=str(DATA / "brumo.jsonl")), 2)
    assert [p.answer for p in first] == ["2^{99}", "\\frac{1}{9}"]
    assert first[0].key == "b/1"


def test_every_shipped_reference_answer_grades_against_itself():
    # A boxed copy of each of the 765 reference answers must verify: catches answers that
    # math-verify cannot read (they would count every sample of that problem as wrong).
    for name in ("aime25", "hmmt", "brumo", "olympiadbench"):
        for p in load_problems(MathBenchmark(name=name, path=str(DATA / f"{name}.jsonl"))):
            assert grade_response("\\boxed{" + p.answer + "}", p.answer)[1], (name, p.answer)


def test_problem_file_errors_name_the_file_and_row(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "question": "q", "answer": "1"}\n{"id": 2, "prompt": "q"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl row 2: no question field"):
        load_problems(MathBenchmark(name="x", path=str(bad)))
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": 1, "problem": "q", "answer": "1"}\n' * 2)
    with pytest.raises(ConfigError, match="row 2: duplicate id '1'"):
        load_problems(MathBenchmark(name="x", path=str(dup)))
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"id": 1, "problem": "q", "answer": "1"}\n{"id": 2,\n')
    with pytest.raises(ConfigError, match=r"torn\.jsonl:2: not valid JSON"):
        load_problems(MathBenchmark(name="x", path=str(torn)))
    with pytest.raises(ConfigError, match="file not found"):
        load_problems(MathBenchmark(name="x", path=str(tmp_path / "none.jsonl")))


def test_config_errors_name_key_paths():
    raw = load_config(REPO / "conf/eval/math.yaml", ["output_dir=/tmp/x"])
    with pytest.raises(ConfigError, match=r"generator\.model"):
        validate_section(MathEvalConfig, raw)
    with pytest.raises(ConfigError, match=r"unknown key 'sampling\.temp'"):
        load_config(REPO / "conf/eval/math.yaml", ["sampling.temp=1"])
    raw = load_config(REPO / "conf/eval/math.yaml", ["output_dir=/x", "generator.model=/m"])
    cfg = validate_section(MathEvalConfig, raw)
    assert (cfg.sampling.n, cfg.sampling.temperature, cfg.sampling.top_p) == (256, 0.6, 0.95)
    assert [b.name for b in cfg.benchmarks] == ["aime25", "hmmt_feb25", "brumo25", "olympiadbench"]
    with pytest.raises(ConfigError, match=r"ks must lie in 1\.\.sampling\.n=256"):
        validate_section(MathEvalConfig, {**raw, "ks": [1, 512]})


# ----------------------------------------------------------------------------- summary


def _record(bench, pid, correct):
    n = len(correct)
    return {
        "benchmark": bench,
        "id": pid,
        "n": n,
        "num_correct": sum(correct),
        "correct": correct,
        "preds": ["1"] * n,
        "num_tokens": [10] * n,
        "truncated": [False] * n,
    }


def test_summary_hand_values():
    records = [
        _record("a", "1", [True, True, False, False]),  # pass@1 1/2, pass@2 5/6, pass@4 1
        _record("a", "2", [False] * 4),  # 0, 0, 0
        _record("b", "1", [True, False, False, False]),  # 1/4, 1/2, 1
    ]
    s = summarize_math(records, ["a", "b"], None, {"a": 2, "b": 1}, {"run_name": "r"})
    a, b = s["benchmarks"]["a"]["pass_at_k"], s["benchmarks"]["b"]["pass_at_k"]
    # a: means over its two problems: pass@1 = 1/4, pass@2 = 5/12, pass@4 = 1/2.
    assert a == pytest.approx({"1": 0.25, "2": 5 / 12, "4": 0.5})
    assert b == pytest.approx({"1": 0.25, "2": 0.5, "4": 1.0})
    # The average weighs each benchmark the same: pass@2 = (5/12 + 1/2) / 2 = 11/24.
    assert s["average"]["pass_at_k"] == pytest.approx({"1": 0.25, "2": 11 / 24, "4": 0.75})
    assert s["complete"] and s["problems_done"] == 3


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_math_recipe_end_to_end_and_resume(tiny_models, tmp_path, run_here, capsys):
    lm, _ = tiny_models
    out = tmp_path / "math"
    args = ["--config", "conf/eval/math_tiny.yaml", f"generator.model={lm}", f"output_dir={out}"]
    first = run_recipe("eval_math.py", *args)
    assert "0 of 8 problems already done" in first.stdout

    lines = (out / "samples.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == 8  # 4 benchmarks x max_problems 2
    assert {r["benchmark"] for r in records} == {"aime25", "hmmt_feb25", "brumo25", "olympiadbench"}
    for r in records:
        assert r["n"] == 4 and len(r["responses"]) == len(r["correct"]) == len(r["preds"]) == 4
        assert r["num_correct"] == sum(r["correct"])
        assert r["prompt"].startswith("[system]\nYou are a helpful assistant.")
        assert all(t <= 24 for t in r["num_tokens"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["problems_done"] == 8
    assert set(summary["average"]["pass_at_k"]) == {"1", "2", "4"}
    assert (out / "config.yaml").exists()

    # Resume after a crash: drop the last 3 problems and leave a torn half line.
    (out / "samples.jsonl").write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    with pytest.warns(UserWarning, match="partial last line"):
        second = run_here("eval_math.py", *args)
    assert "5 of 8 problems already done" in second
    again = (out / "samples.jsonl").read_text().splitlines()
    assert len(again) == 8
    # Per-item seeds: the re-sampled problems are exactly what the first run drew.
    assert [json.loads(x)["responses"] for x in again] == [r["responses"] for r in records]

    # Nothing left: no model is loaded, the summary is rewritten identically.
    third = run_here("eval_math.py", *args)
    assert "8 of 8 problems already done" in third
    assert json.loads((out / "summary.json").read_text()) == summary

    # Changing what the samples depend on is refused, not silently mixed: one line naming the
    # key path and its two values, without a traceback, and the config-error exit code 2.
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        run_here("eval_math.py", *args, "sampling.temperature=1.0")
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert re.search(
        r"^eval_math: .*\(sampling\.temperature: 0\.6 -> 1\.0\)\. Use a new output_dir", err, re.M
    ), err
    assert "Traceback" not in err


@pytest.mark.slow
def test_sharded_run_equals_unsharded(tiny_models, tmp_path, run_here):
    lm, _ = tiny_models
    base = ["--config", "conf/eval/math_tiny.yaml", f"generator.model={lm}", "max_problems=1"]
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    run_here("eval_math.py", *base, f"output_dir={whole}")
    for index in (0, 1):
        out = run_here(
            "eval_math.py",
            *base,
            f"output_dir={sharded}",
            f"shard.index={index}",
            "shard.count=2",
        )
        assert "0 of 2 problems already done" in out  # 4 problems, every other one
    assert not (sharded / "summary.json").exists()  # shards never write the summary
    final = run_here("eval_math.py", *base, f"output_dir={sharded}")
    assert "4 of 4 problems already done" in final

    def responses(folder):
        rows = [
            json.loads(x) for f in folder.glob("samples*.jsonl") for x in f.read_text().splitlines()
        ]
        return {r["key"]: r["responses"] for r in rows}

    # Per-item seeds: which process sampled a problem does not change its samples.
    assert responses(sharded) == responses(whole)
    whole_summary = json.loads((whole / "summary.json").read_text())
    assert json.loads((sharded / "summary.json").read_text()) == whole_summary


def test_slurm_job_dry_run(tmp_path):
    # 4 GPUs, 2 per engine: two shards on GPUs 0,1 and 2,3, then the summary run.
    site = tmp_path / "site.env"  # empty: a developer's slurm/site.env must not leak in
    site.write_text("")
    env = {
        **RECIPE_ENV,
        "CONTAINER_IMAGE": "/images/darling.sqsh",
        "RESULTS_DIR": "/results",
        "DATA_DIR": "/data",
        "MODEL": "/ckpt/step_200",
        "GPUS_PER_NODE": "4",
        "GPUS_PER_ENGINE": "2",
        "DARLING_SITE_ENV": str(site),
    }
    proc = subprocess.run(
        ["bash", str(REPO / "slurm/eval_math.sub"), "--dry-run", "sampling.n=16"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    commands = [x for x in proc.stdout.splitlines() if x.startswith("+ srun")]
    assert len(commands) == 3
    assert "CUDA_VISIBLE_DEVICES=0\\,1" in commands[0] and "shard.index=0" in commands[0]
    assert "CUDA_VISIBLE_DEVICES=2\\,3" in commands[1] and "shard.count=2" in commands[1]
    assert "shard." not in commands[2]  # the final run covers every problem: the summary
    assert all("generator.backend=vllm" in c and "sampling.n=16" in c for c in commands)
    assert all("DARLING_DATA_DIR=/opt/darling-nemo/data" in c for c in commands)
    assert "output_dir=/results/eval/step_200/math" in commands[2]
    bad = subprocess.run(
        ["bash", str(REPO / "slurm/eval_math.sub"), "--dry-run"],
        env={**env, "MODEL": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "MODEL is not set" in bad.stderr


@pytest.mark.parametrize(
    "name",
    ["math", "math_tiny", "noveltybench", "noveltybench_tiny", "creative", "creative_tiny"],
)
def test_every_eval_config_validates_and_shows_its_command(name):
    from darling_nemo.evals.schema import CreativeEvalConfig, NoveltyBenchConfig

    path = REPO / "conf" / "eval" / f"{name}.yaml"
    kind = name.split("_")[0]
    model, recipe = {
        "math": (MathEvalConfig, "recipes/eval_math.py"),
        "noveltybench": (NoveltyBenchConfig, "recipes/eval_noveltybench.py"),
        "creative": (CreativeEvalConfig, "recipes/eval_creative.py"),
    }[kind]
    required = ["output_dir=/o", "generator.model=/m"]
    if kind == "creative":
        required += ["prompts=/p.jsonl", "judge.model=j"]
    cfg = validate_section(model, load_config(path, required))
    assert cfg.generator.backend == ("transformers" if name.endswith("tiny") else "vllm")
    header = "\n".join(x for x in path.read_text().splitlines() if x.startswith("#"))
    assert f"{recipe} --config conf/eval/{name}.yaml" in header


def _cuda_and_vllm() -> bool:
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_and_vllm(), reason="needs a CUDA GPU and vLLM")
def test_vllm_backend_end_to_end(tmp_path):
    from darling_nemo.evals.tiny import build_tiny_models

    lm, _ = build_tiny_models(tmp_path / "tiny", hidden_size=128, num_heads=2)
    out = tmp_path / "math"
    run_recipe(
        "eval_math.py",
        "--config",
        "conf/eval/math_tiny.yaml",
        f"generator.model={lm}",
        f"output_dir={out}",
        "generator.backend=vllm",
        "generator.dtype=bfloat16",
        "generator.gpu_memory_utilization=0.3",
        "generator.max_model_len=2048",
    )
    records = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(len(r["responses"]) == 4 for r in records)
    assert all(0 < t <= 24 for r in records for t in r["num_tokens"])
    assert json.loads((out / "summary.json").read_text())["complete"]


# ----------------------------------------------------------------------------- right answers


class ScriptedSampler:
    """A Sampler that answers each problem right in a fixed number of its n samples.

    It reads the question back from the prompt ids (one token per character), so grading,
    counting and pass@k run on answers that are really correct, which a tiny random model
    never produces.
    """

    def __init__(self, script: dict[str, tuple[str, str, list[int]]]) -> None:
        from darling_nemo.trl.policy import char_tokenizer

        self.tokenizer = char_tokenizer()
        self.script = script  # question -> (right answer, wrong answer, right sample indices)
        self.seen_seeds: list[int] = []

    def sample(self, prompts, seeds, sampling):
        from darling_nemo.evals.generation import Completion

        out = []
        for ids, seed in zip(prompts, seeds, strict=True):
            self.seen_seeds.append(seed)
            text = self.tokenizer.decode(ids)
            ((right, wrong, where),) = [v for q, v in self.script.items() if q in text]
            out.append(
                [
                    Completion(
                        f"Working... so \\boxed{{{right if i in where else wrong}}}", 9, False
                    )
                    for i in range(sampling.n)
                ]
            )
        return out


def test_scripted_right_answers_through_run_math_eval(tmp_path):
    from darling_nemo.evals.math import run_math_eval

    script = {
        # question: (right, wrong, indices of the right samples among n = 4)
        "What is 1/3 squared?": ("1/9", "0.111", [2]),  # c = 1; 1/9 == \frac{1}{9}
        "What is 6 times 7?": ("42", "41", [0, 1, 3]),  # c = 3
        "Solve |x - 3.5| < 1.5 with x >= 2.": ("[2, 5)", "[2, 6)", []),  # c = 0
        "What is 2 to the 10th?": ("1024", "2^{9}", [1, 2]),  # c = 2; 1024 == 2^{10}
    }
    rows_a = [
        {"id": "p1", "question": "What is 1/3 squared?", "answer": "\\frac{1}{9}"},
        {"id": "p2", "question": "What is 6 times 7?", "answer": "42"},
    ]
    rows_b = [
        {"id": "p1", "question": "Solve |x - 3.5| < 1.5 with x >= 2.", "answer": "[2,5)"},
        {"id": "p2", "question": "What is 2 to the 10th?", "answer": "2^{10}"},
    ]
    for name, rows in (("a", rows_a), ("b", rows_b)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = MathEvalConfig(
        output_dir=str(tmp_path / "out"),
        generator={"model": "scripted"},
        prompt={"chat_template": False},
        sampling={"n": 4, "max_new_tokens": 16},
        benchmarks=[
            {"name": "a", "path": str(tmp_path / "a.jsonl")},
            {"name": "b", "path": str(tmp_path / "b.jsonl")},
        ],
        grading={"workers": 1},
    )
    sampler = ScriptedSampler(script)
    summary = run_math_eval(cfg, sampler=sampler)
    assert len(sampler.seen_seeds) == 4  # every problem sampled once

    records = {
        r["key"]: r
        for r in map(json.loads, (tmp_path / "out/samples.jsonl").read_text().splitlines())
    }
    assert {k: r["num_correct"] for k, r in records.items()} == {
        "a/p1": 1,
        "a/p2": 3,
        "b/p1": 0,  # [2, 6) is not the interval [2, 5)
        "b/p2": 2,
    }
    assert records["a/p1"]["correct"] == [False, False, True, False]
    assert records["b/p2"]["correct"] == [False, True, True, False]
    assert records["a/p1"]["preds"][2] is not None

    # pass@k = 1 - C(n-c, k) / C(n, k) with n = 4, C(4, 2) = 6:
    #   c=1: pass@1 1/4, pass@2 1 - C(3,2)/6 = 1/2, pass@4 1
    #   c=3: pass@1 3/4, pass@2 1 - C(1,2)/6 = 1,   pass@4 1
    #   c=0: 0, 0, 0
    #   c=2: pass@1 1/2, pass@2 1 - C(2,2)/6 = 5/6, pass@4 1
    # a = mean(c=1, c=3): 1/2, 3/4, 1;  b = mean(c=0, c=2): 1/4, 5/12, 1/2
    # average over benchmarks: 3/8, (3/4 + 5/12)/2 = 7/12, 3/4
    bench = summary["benchmarks"]
    assert bench["a"]["pass_at_k"] == pytest.approx({"1": 0.5, "2": 0.75, "4": 1.0})
    assert bench["b"]["pass_at_k"] == pytest.approx({"1": 0.25, "2": 5 / 12, "4": 0.5})
    assert summary["average"]["pass_at_k"] == pytest.approx({"1": 3 / 8, "2": 7 / 12, "4": 0.75})
    assert summary["complete"] and bench["a"]["unanswered_fraction"] == 0.0
    on_disk = json.loads((tmp_path / "out/summary.json").read_text())
    assert on_disk["average"]["pass_at_k"] == summary["average"]["pass_at_k"]
