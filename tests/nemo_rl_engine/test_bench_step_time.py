"""The step-time benchmark's duration model and the rehearsal's pacing (no NeMo-RL needed)."""

from __future__ import annotations

import json
import time

import pytest

from darling_nemo.bench.step_time import paper_scales, report
from darling_nemo.rehearsal.pacing import MODEL_ENV, paced, phase_seconds


def test_without_a_model_nothing_is_paced(monkeypatch):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    assert phase_seconds("judge") == 0.0
    started = time.perf_counter()
    assert paced("judge")(lambda x: x + 1)(1) == 2
    assert time.perf_counter() - started < 0.05


def test_a_paced_call_lasts_its_scaled_duration_counting_its_own_work(monkeypatch, tmp_path):
    model = tmp_path / "model.json"
    # 4 simulated s x 0.05 real s per simulated s = 0.2 s real
    model.write_text(json.dumps({"real_s_per_simulated_s": 0.05, "phases": {"training": 4}}))
    monkeypatch.setenv(MODEL_ENV, str(model))
    assert phase_seconds("training") == pytest.approx(0.2)
    assert phase_seconds("generation") == 0.0  # not in the model: not paced

    def work():
        time.sleep(0.15)  # the stand-in's own compute counts towards the 0.2 s
        return "done"

    started = time.perf_counter()
    assert paced("training")(work)() == "done"
    assert 0.2 <= time.perf_counter() - started < 0.3


def test_unknown_phases_are_refused_naming_the_file(monkeypatch, tmp_path):
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"real_s_per_simulated_s": 1, "phases": {"traning": 1}}))
    monkeypatch.setenv(MODEL_ENV, str(model))
    with pytest.raises(ValueError, match=r"model\.json: unknown phases \['traning'\]"):
        phase_seconds("training")


def test_the_paper_scale_models_by_hand():
    math, chat = paper_scales()
    # judge: 7,168 x 4,096 = 29.36 M tokens / (46,679 x 8 = 373,400 tok/s) = 78.6 s + 0.5 s
    assert math.phases["judge"] == pytest.approx(79.1, abs=0.1)
    # generation: 8,192 decode steps x 10 ms + 10 s
    assert math.phases["generation"] == pytest.approx(91.92)
    # training is 3 forwards; the reference log-probs cost one forward like the previous ones
    assert math.phases["training"] == pytest.approx(3 * math.phases["logprobs"])
    assert math.phases["reference_logprobs"] == math.phases["logprobs"]
    # 1,792 x 1,400 = 2.51 M tokens / 1.6 M tok/s = 1.57 s + 0.5 s
    assert chat.phases["judge"] == pytest.approx(2.068, abs=1e-3)


def test_report_puts_the_overlapped_wait_on_the_critical_path_not_in_training():
    timers = {
        "total_step_time": 110.0,
        "generation": 60.0,
        "policy_and_reference_logprobs": 10.0,
        "policy_training": 35.0,  # 30 s of training + 5 s waiting for the judge
        "darling_judge": 5.0,
    }
    row = report([("math: x", "overlap", timers)]).splitlines()[-1]
    # other = 110 - 5 - 10 - 30 - 60 = 5; overhead = 5 / (110 - 5) = 4.8%
    assert row == "| math | overlap | 110.0 | 60.0 | 10.0 | 30.0 | 5.0 | 5.0 | 4.8% |"
