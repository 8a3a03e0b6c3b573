"""The step-time benchmark's duration model and the rehearsal's pacing (no NeMo-RL needed)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from darling_nemo.bench.step_time import paper_scales, report
from darling_nemo.rehearsal import pacing
from darling_nemo.rehearsal.pacing import (
    MODEL_ENV,
    length_fraction,
    paced,
    paced_judge,
    phase_seconds,
    response_seconds,
    settle_seconds,
)


@pytest.fixture
def model(monkeypatch, tmp_path):
    """use_model(scale, phases, capped_fraction): the benchmark's model file, in effect."""
    path = tmp_path / "model.json"

    def use_model(scale: float, phases: dict, capped_fraction: float = 0.0) -> None:
        spec = {"real_s_per_simulated_s": scale, "phases": phases}
        path.write_text(json.dumps({**spec, "capped_fraction": capped_fraction}))
        monkeypatch.setenv(MODEL_ENV, str(path))

    return use_model


@pytest.fixture
def asked(monkeypatch):
    """The durations the pacer asked for: every `seconds_left(seconds, started)` call's
    `seconds` (the modelled total) and what it returned (the sleep). The tests check these
    instead of an upper bound on wall time, which a loaded machine can exceed at any time;
    the wall-time lower bounds stay (a sleep never ends early)."""
    calls: list[tuple[float, float]] = []
    real = pacing.seconds_left

    def recording(seconds: float, started: float) -> float:
        calls.append((seconds, left := real(seconds, started)))
        return left

    monkeypatch.setattr(pacing, "seconds_left", recording)
    return calls


def test_without_a_model_nothing_is_paced(monkeypatch, asked):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    assert phase_seconds("judge_call") == 0.0
    judge = object()
    assert paced_judge(judge) is judge  # no wrapper at all outside the benchmark
    assert paced("training")(lambda x: x + 1)(1) == 2
    assert asked == [(0.0, 0.0)]  # nothing modelled, no sleep


def test_a_paced_call_lasts_its_scaled_duration_counting_its_own_work(model, asked):
    # 4 simulated s x 0.05 real s per simulated s = 0.2 s real
    model(0.05, {"training": 4})
    assert phase_seconds("training") == pytest.approx(0.2)
    assert phase_seconds("generation") == 0.0  # not in the model: not paced

    def work():
        time.sleep(0.15)  # the stand-in's own compute counts towards the 0.2 s
        return "done"

    started = time.perf_counter()
    assert paced("training")(work)() == "done"
    assert time.perf_counter() - started >= 0.2
    ((modelled, slept),) = asked
    assert modelled == pytest.approx(0.2)
    assert slept <= 0.2 - 0.15  # what is left after the work's own 0.15 s, not another 0.2 s


def test_unknown_phases_are_refused_naming_the_file(model):
    model(1, {"traning": 1})
    with pytest.raises(ValueError, match=r"model\.json: unknown phases \['traning'\]"):
        phase_seconds("training")


def test_a_model_without_its_keys_is_refused_naming_the_file(monkeypatch, tmp_path):
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"real_s_per_simulated_s": 1, "phases": {}}))
    monkeypatch.setenv(MODEL_ENV, str(model))
    with pytest.raises(ValueError, match=r"model\.json: missing \['capped_fraction'\]"):
        phase_seconds("training")


def test_the_judge_lasts_its_calls_and_pairs_and_keeps_its_counters(model, asked):
    model(0.02, {"judge_call": 1.0, "judge_pair": 0.5})

    class Counting:
        def __init__(self):
            self.stats = {"requests": 3}

        def __call__(self, pairs):
            return [0.5] * len(pairs)

    judge = paced_judge(Counting())
    assert judge.stats == {"requests": 3}  # metrics.judge_usage reads them through
    started = time.perf_counter()
    assert judge([("a", "b")] * 4) == [0.5] * 4
    assert time.perf_counter() - started >= 0.06
    # (1 + 4 x 0.5) simulated s x 0.02 = 0.06 s real
    assert [modelled for modelled, _ in asked] == [pytest.approx(0.06)]


def test_response_lengths_follow_the_capped_share(model):
    model(1.0, {"generation": 10.0, "generation_decode": 80.0}, capped_fraction=0.1)
    fractions = [length_fraction(call, 0.1) for call in range(1, 1001)]
    assert sum(f == 1.0 for f in fractions) == pytest.approx(100, abs=2)  # 10% at the cap
    # the rest spread evenly over [0, 1): mean 0.1 x 1 + 0.9 x 0.5 = 0.55
    assert sum(fractions) / 1000 == pytest.approx(0.55, abs=0.01)
    assert all(0.0 <= f <= 1.0 for f in fractions)
    # 10 s + 80 s x the call's fraction
    assert response_seconds(7) == pytest.approx(10.0 + 80.0 * length_fraction(7, 0.1))


def test_the_words_the_judge_reads_settle_at_the_modelled_share_of_a_response(model):
    model(1.0, {"generation": 10.0, "generation_decode": 80.0}, capped_fraction=0.1)
    # without settle_fraction: settled when the response ends
    assert settle_seconds(7) == pytest.approx(response_seconds(7))
    spec = json.loads(Path(os.environ[MODEL_ENV]).read_text())
    Path(os.environ[MODEL_ENV]).write_text(json.dumps({**spec, "settle_fraction": 0.5}))
    capped = next(call for call in range(1, 100) if length_fraction(call, 0.1) == 1.0)
    short = next(call for call in range(1, 100) if length_fraction(call, 0.1) < 0.5)
    assert settle_seconds(capped) == pytest.approx(10.0 + 80.0 * 0.5)  # halfway through
    assert settle_seconds(short) == pytest.approx(response_seconds(short))  # at its end


def test_the_paper_scale_models_by_hand():
    math, chat = paper_scales()
    # judge: 7,168 x 4,096 = 29.36 M tokens / (8 H100s x 45,117 tok/s: the measured 11.05
    # full pairs/s x 4,083 tokens) = 29,360,128 / 360,937 = 81.34 s + 0.5 s
    assert math.judge_s == pytest.approx(81.84, abs=0.01)
    # each of the rehearsal's 2 x 28 = 56 pairs costs 81.34 / 56 = 1.45 s
    assert math.phases["judge_pair"] == pytest.approx(81.34 / 56, abs=0.01)
    # generation: 10 s, then 8,192 decode steps x 10 ms for a response of the cap
    assert math.phases["generation"] + math.phases["generation_decode"] == pytest.approx(91.92)
    # training is 3 forwards; the reference log-probs cost one forward like the previous ones
    assert math.phases["training"] == pytest.approx(3 * math.phases["logprobs"])
    assert math.phases["reference_logprobs"] == math.phases["logprobs"]
    # 1,792 x 1,400 = 2.51 M tokens / 1.6 M tok/s = 1.57 s + 0.5 s
    assert chat.judge_s == pytest.approx(2.068, abs=1e-3)
    assert chat.phases["judge_pair"] == pytest.approx(1.568 / 56)
    # the math classifier reads (4,096 - 3) // 2 = 2,046 words = 2,046 / 0.37 = 5,530
    # tokens of a response: 5,530 / 8,192 = 67.5% of a capped one; ModernBERT's 1,022
    # words = 1,363 tokens at 0.75 words/token, past the 1,024 cap: settled at the end
    assert math.settle_fraction == pytest.approx(0.675, abs=0.001)
    assert chat.settle_fraction == 1.0


def test_report_puts_the_overlapped_wait_on_the_critical_path_not_in_training():
    timers = {
        "total_step_time": 110.0,
        "generation": 60.0,
        "policy_and_reference_logprobs": 10.0,
        "policy_training": 35.0,  # 30 s of training + 5 s waiting for the judge
        "darling_judge": 5.0,
        "darling/pairs_judged": 50.0,
        "darling/pairs_judged_during_generation": 41.0,
    }
    row = report([("math: x", "overlap+stream", timers)]).splitlines()[-1]
    # other = 110 - 5 - 10 - 30 - 60 = 5; overhead = 5 / (110 - 5) = 4.8%
    assert (
        row == "| math | overlap+stream | 110.0 | 60.0 | 10.0 | 30.0 | 5.0 | 5.0 | 4.8% | 50 (41) |"
    )


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_the_benchmark_runs_nemo_rls_loop_and_prints_its_row(capsys):
    """One run of the real benchmark (WildChat scale, overlap + during generation): the
    path a user's `python -m darling_nemo.bench.step_time` takes, so a change to the
    rehearsal it builds on cannot break it unnoticed."""
    pytest.importorskip("nemo_rl")
    from darling_nemo.bench.step_time import main

    assert main(["--scales", "wildchat", "--modes", "overlap+prefix"]) == 0
    # the duration model is this run's only: a rehearsal after it in this process is not paced
    assert MODEL_ENV not in os.environ
    row = next(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| WildChat")
    )
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "overlap+prefix"
    # generation is paced to 8 + 12.3 x the longest response's share of the cap (~20 s)
    assert 15 < float(cells[3]) < 40, row
    # "55 (48, 0 settled early)": the stream judged pairs; at WildChat's scale the
    # classifier's 1,022 words are past the 1,024-token cap, so none settles early
    pairs = re.fullmatch(r"(\d+) \((\d+), (\d+) settled early\)", cells[9])
    assert pairs is not None, row
    judged, during, settled = map(int, pairs.groups())
    assert judged > 0 and during > 0 and settled == 0, row
