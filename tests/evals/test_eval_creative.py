"""Creative writing: rubric and verdict parsing, Elo by hand, the judge client against a real
HTTP server on 127.0.0.1 (good, malformed, failing, slow replies), and the recipe end to end
with pairwise Elo between two tiny-model runs."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest
from helpers import run_recipe

from darling_nemo.evals.creative import (
    ReplyParseError,
    fit_elo,
    parse_rubric,
    parse_verdicts,
    piece_score,
    run_calls,
)
from darling_nemo.evals.schema import EndpointConfig, RubricConfig

RUBRIC = RubricConfig(
    criteria=["Originality", "Coherence", "Clichés"], negative_criteria=["Clichés"]
)
VERDICT_CRITERIA = ["Originality", "Prose quality"]

GOOD_REPLY = """[Analysis]
Original premise (Originality: 3 would be unfair), weak middle.

[Scores]
Originality: 16
Coherence: 12
Clichés: 4
"""
# Piece score: mean(16, 12, 20 - 4) = 44/3 (Clichés is lower-is-better, so inverted).
GOOD_SCORE = 44 / 3

# ----------------------------------------------------------------------------- parsing


def test_parse_rubric_plain_and_scores_section():
    scores = parse_rubric(GOOD_REPLY, RUBRIC)
    assert scores == {"Originality": 16.0, "Coherence": 12.0, "Clichés": 4.0}  # not the 3
    assert piece_score(scores, RUBRIC) == pytest.approx(GOOD_SCORE)


def test_parse_rubric_markdown_brackets_and_fractions():
    reply = "Scores:\n- **Originality**: [15]\n2. coherence : 7/10\n**CLICHÉS:** 0"
    # 7/10 is rescaled to the 0..20 scale: 14.
    assert parse_rubric(reply, RUBRIC) == {"Originality": 15.0, "Coherence": 14.0, "Clichés": 0.0}


def test_parse_rubric_rejects_too_few_and_out_of_range():
    with pytest.raises(ReplyParseError, match="read 1 of 3 criteria"):
        parse_rubric("I liked it.\nOriginality: 12", RUBRIC)
    # 25 > 20 is ignored, leaving 2 of 3 (< 80%): malformed.
    with pytest.raises(ReplyParseError, match="missing \\['Coherence'\\]"):
        parse_rubric("Originality: 10\nCoherence: 25\nClichés: 2", RUBRIC)
    with pytest.raises(ReplyParseError):
        parse_rubric("", RUBRIC)


def test_parse_verdicts():
    reply = "Both fine.\n[Verdicts]\nOriginality: A+++\n**Prose quality**: Writer B+"
    assert parse_verdicts(reply, VERDICT_CRITERIA) == (3, 1)
    assert parse_verdicts("Originality: b++\nProse quality: B", VERDICT_CRITERIA) == (0, 3)
    with pytest.raises(ReplyParseError, match="Prose quality"):
        parse_verdicts("Originality: A++", VERDICT_CRITERIA)


def test_elo_hand_values():
    # A scores 3 of 4 against B: Bradley-Terry ratio 3 -> gap 400*log10(3) = 190.85, split
    # around the mean 1000.
    games = [("A", "B", 1.0)] * 3 + [("A", "B", 0.0)]
    elo = fit_elo(games, prior_games=0)
    assert elo["A"] - elo["B"] == pytest.approx(400 * math.log10(3), abs=1e-6)
    assert elo["A"] + elo["B"] == pytest.approx(2000)
    # 5 wins of 5 plus one virtual draw: 5.5 of 6 -> ratio 11 -> gap 400*log10(11) = 416.6.
    elo = fit_elo([("A", "B", 1.0)] * 5, prior_games=1)
    assert elo["A"] - elo["B"] == pytest.approx(400 * math.log10(11), abs=1e-6)
    # Draws only: equal ratings. A chain A > B > C orders the ratings.
    assert fit_elo([("A", "B", 0.5)] * 4) == pytest.approx({"A": 1000, "B": 1000})
    chain = fit_elo([("A", "B", 1.0), ("B", "C", 1.0)])
    assert chain["A"] > chain["B"] > chain["C"]


# ----------------------------------------------------------------------------- a real server


class JudgeServer:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 whose behaviour is chosen by a
    tag in the writing prompt; counts the requests for each distinct message."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.tags: Counter[str] = Counter()

    @staticmethod
    def completion(content: str) -> dict:
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    async def handle(self, request):
        from aiohttp import web

        body = await request.json()
        text = body["messages"][-1]["content"]
        self.seen[text] += 1
        first = self.seen[text] == 1
        tag = next(
            (
                t
                for t in (
                    "ALWAYS_500",
                    "BAD_REQUEST",
                    "MALFORMED_ONCE",
                    "HTTP500_ONCE",
                    "BADBODY_ONCE",
                    "SLOW_ONCE",
                    "MARKDOWN",
                    "PARTIAL",
                )
                if t in text
            ),
            "GOOD",
        )
        self.tags[tag] += 1
        if tag == "ALWAYS_500":
            return web.Response(status=500, text="internal error")
        if tag == "BAD_REQUEST":
            return web.Response(status=400, text="context length exceeded")
        if tag == "HTTP500_ONCE" and first:
            return web.Response(status=503, text="overloaded")
        if tag == "BADBODY_ONCE" and first:
            return web.Response(status=200, text="<html>proxy error</html>")
        if tag == "SLOW_ONCE" and first:
            await asyncio.sleep(1.5)  # longer than the client's timeout
        if tag == "MALFORMED_ONCE" and first:
            return web.json_response(self.completion("I would rather not give numbers."))
        if tag == "PARTIAL":
            return web.json_response(self.completion("Originality: 12"))
        if "[WRITER A]" in text:
            # The longer piece wins every criterion, whichever side it is shown on.
            a = text.split("[WRITER A]\n", 1)[1].split("\n[END WRITER A]", 1)[0]
            b = text.split("[WRITER B]\n", 1)[1].split("\n[END WRITER B]", 1)[0]
            who = "A" if len(a) >= len(b) else "B"
            lines = "\n".join(f"{c}: {who}+++" for c in VERDICT_CRITERIA)
            return web.json_response(self.completion(f"Close.\n[Verdicts]\n{lines}"))
        if tag == "MARKDOWN":
            return web.json_response(
                self.completion(
                    "**Scores**\n- **Originality**: 10/20\n- Coherence: [8]\n- Clichés: 20"
                )
            )
        return web.json_response(self.completion(GOOD_REPLY))


@pytest.fixture
def judge_server():
    from aiohttp import web

    server = JudgeServer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner, runner.addresses[0][1]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    server.base_url = f"http://127.0.0.1:{port}/v1"
    yield server
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_client_retries_and_counts_against_a_real_server(judge_server):
    cfg = EndpointConfig(
        base_url=judge_server.base_url,
        model="judge",
        timeout_s=1.0,
        max_attempts=3,
        backoff_s=0.01,
        concurrency=4,
        api_key_env=None,
    )
    tags = [
        "GOOD",
        "MALFORMED_ONCE",
        "HTTP500_ONCE",
        "BADBODY_ONCE",
        "SLOW_ONCE",
        "MARKDOWN",
        "ALWAYS_500",
        "BAD_REQUEST",
        "PARTIAL",
    ]
    jobs = [
        (
            tag,
            [{"role": "user", "content": f"Write about {tag}."}],
            lambda r: parse_rubric(r, RUBRIC),
        )
        for tag in tags
    ]
    results = {}
    run_calls(cfg, jobs, lambda key, result: results.__setitem__(key, result), "test")

    assert set(results) == set(tags)  # every job comes back, failed or not
    expected_attempts = {
        "GOOD": 1,
        "MALFORMED_ONCE": 2,
        "HTTP500_ONCE": 2,
        "BADBODY_ONCE": 2,
        "SLOW_ONCE": 2,
        "MARKDOWN": 1,
        "ALWAYS_500": 3,
        "BAD_REQUEST": 1,
        "PARTIAL": 3,
    }
    assert {k: r.attempts for k, r in results.items()} == expected_attempts
    ok = {k for k, r in results.items() if r.ok}
    assert ok == {"GOOD", "MALFORMED_ONCE", "HTTP500_ONCE", "BADBODY_ONCE", "SLOW_ONCE", "MARKDOWN"}
    assert results["GOOD"].value == {"Originality": 16.0, "Coherence": 12.0, "Clichés": 4.0}
    assert results["MARKDOWN"].value == {"Originality": 10.0, "Coherence": 8.0, "Clichés": 20.0}
    # Each failure says why.
    assert "unparsable reply" in results["MALFORMED_ONCE"].errors[0]
    assert "HTTP 503" in results["HTTP500_ONCE"].errors[0]
    assert "malformed completion body" in results["BADBODY_ONCE"].errors[0]
    assert "Timeout" in results["SLOW_ONCE"].errors[0]
    assert len(results["ALWAYS_500"].errors) == 3 and "HTTP 500" in results["ALWAYS_500"].errors[-1]
    assert "HTTP 400" in results["BAD_REQUEST"].errors[0]  # not retried: would fail again
    assert results["PARTIAL"].reply == "Originality: 12"  # the last reply is kept for a look
    # The server saw exactly the attempts the client reports.
    assert sum(judge_server.tags.values()) == sum(expected_attempts.values())


# ----------------------------------------------------------------------------- end to end


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_creative_recipe_end_to_end_resume_and_elo(tiny_models, tmp_path, judge_server, run_here):
    lm, _ = tiny_models
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": pid, "prompt": text}) + "\n"
            for pid, text in [
                ("p0", "GOOD: a story about a lighthouse keeper."),
                ("p1", "MALFORMED_ONCE: a poem about rain."),
                ("p2", "ALWAYS_500: a letter from the future."),
            ]
        )
    )
    common = [
        "--config",
        "conf/eval/creative_tiny.yaml",
        f"generator.model={lm}",
        f"prompts={prompts}",
        f"judge.base_url={judge_server.base_url}",
        "judge.model=judge",
        "judge.max_attempts=3",
        "judge.api_key_env=null",
        "max_prompts=3",
        "+rubric.criteria=[Originality,Coherence,Clichés]",
        "+rubric.negative_criteria=[Clichés]",
        f"+pairwise.criteria={json.dumps(VERDICT_CRITERIA)}",
    ]
    run_a = tmp_path / "runA"
    proc = run_recipe("eval_creative.py", *common, f"output_dir={run_a}", "run_name=runA")
    assert "2 pieces failed to be judged" in proc.stdout

    judged = _lines(run_a / "judgements.jsonl")
    assert len(judged) == 6  # 3 prompts x 2 pieces, failures included
    by_prompt = {pid: [r for r in judged if r["id"] == pid] for pid in ("p0", "p1", "p2")}
    assert all(r["status"] == "ok" and r["attempts"] == 1 for r in by_prompt["p0"])
    assert all(r["status"] == "ok" and r["attempts"] == 2 for r in by_prompt["p1"])
    assert all(r["status"] == "failed" and r["attempts"] == 3 for r in by_prompt["p2"])
    assert all(r["score"] == pytest.approx(GOOD_SCORE) for r in judged if r["status"] == "ok")
    summary = json.loads((run_a / "summary.json").read_text())
    assert (summary["judged"], summary["failed"], summary["items_total"]) == (4, 2, 6)
    assert summary["retries"] == 2 * 1 + 2 * 2  # p1: one retry each; p2: two each
    assert summary["rubric_score"] == pytest.approx(GOOD_SCORE)
    assert sorted(summary["failed_items"]) == ["p2#0", "p2#1"]
    assert not summary["complete"]

    # Resume: only the failed pieces are asked again (3 attempts each), the rest is kept.
    before = sum(judge_server.tags.values())
    out = run_here("eval_creative.py", *common, f"output_dir={run_a}", "run_name=runA")
    assert "3 of 3 prompts already generated" in out and "2 pieces to judge" in out
    assert sum(judge_server.tags.values()) - before == 2 * 3
    assert len(_lines(run_a / "judgements.jsonl")) == 8  # 2 superseding failed records

    # A second run (another seed) compared pairwise with runA, both orders -> Elo.
    run_b = tmp_path / "runB"
    out = run_here(
        "eval_creative.py",
        *common,
        f"output_dir={run_b}",
        "run_name=runB",
        "sampling.seed=1",
        "pairwise.enabled=true",
        f"pairwise.opponents=[{run_a}]",
    )
    assert "Elo runA" in out and "Elo runB" in out
    games = _lines(run_b / "pairwise.jsonl")
    assert len(games) == 3 * 2 * 2  # prompts x pieces x orders
    gen_a = {r["id"]: r["generations"] for r in _lines(run_a / "generations.jsonl")}
    gen_b = {r["id"]: r["generations"] for r in _lines(run_b / "generations.jsonl")}
    for g in games:
        pid, sample = g["item"].split("#")
        if pid == "p2":
            assert g["status"] == "failed"
            continue
        mine, theirs = gen_b[pid][int(sample)], gen_a[pid][int(sample)]
        shown_a, shown_b = (mine, theirs) if g["a"] == "runB" else (theirs, mine)
        assert g["score_a"] == (1.0 if len(shown_a) >= len(shown_b) else 0.0)
    elo = json.loads((run_b / "summary.json").read_text())["elo"]
    assert (elo["games"], elo["failed"]) == (8, 4)
    ok_games = [(g["a"], g["b"], g["score_a"]) for g in games if g["status"] == "ok"]
    assert elo["ratings"] == pytest.approx(fit_elo(ok_games))
    wins_b = sum(s if a == "runB" else 1 - s for a, _, s in ok_games)
    assert (elo["ratings"]["runB"] > elo["ratings"]["runA"]) == (wins_b > 4)


@pytest.mark.slow
def test_an_evaluation_in_which_every_judgement_failed_is_a_failed_run(tiny_models, tmp_path):
    """No judge server reached: every piece fails, and the run says so in one line with the
    cause and exits 1 (it used to end with exit 0 and the cause only in judgements.jsonl)."""
    lm, _ = tiny_models
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "p0", "prompt": "a story about a lighthouse"}) + "\n")
    proc = run_recipe(
        "eval_creative.py",
        "--config",
        "conf/eval/creative_tiny.yaml",
        f"generator.model={lm}",
        f"prompts={prompts}",
        f"judge.base_url={dead}",
        "judge.model=judge",
        "judge.max_attempts=1",
        "judge.api_key_env=null",
        "max_prompts=1",
        f"output_dir={tmp_path / 'out'}",
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    line = [x for x in proc.stderr.splitlines() if x.strip()][-1]
    assert line.startswith("eval_creative: all 2 pieces failed to be judged"), line
    assert "last error:" in line and "None" not in line.split("last error:")[1]


# ----------------------------------------------------------------- the tiny config as shipped


@pytest.fixture
def stand_in_judge():
    """darling_nemo.evals.stand_in_judge on a free port, serving from a thread."""
    from darling_nemo.evals.stand_in_judge import serve

    server = serve("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_the_stand_in_judge_answers_in_the_rubric_and_pairwise_formats():
    from darling_nemo.evals.creative import PAIRWISE_PROMPT, RUBRIC_PROMPT
    from darling_nemo.evals.stand_in_judge import reply_to

    rubric = RubricConfig()
    prompt = RUBRIC_PROMPT.format(
        score_max="20",
        writing_prompt="a story",
        response="Once upon a time.",
        criteria="\n".join(rubric.criteria),
        negative_criteria=", ".join(rubric.negative_criteria),
    )
    scores = parse_rubric(reply_to(prompt), rubric)
    assert set(scores) == set(rubric.criteria)
    assert parse_rubric(reply_to(prompt), rubric) == scores  # deterministic
    pair = PAIRWISE_PROMPT.format(
        writing_prompt="a story", piece_a="short", piece_b="much longer", criteria="Style\nPlot"
    )
    assert parse_verdicts(reply_to(pair), ["Style", "Plot"]) == (0, 6)


def test_the_tiny_config_runs_as_its_header_says(tiny_models, tmp_path, stand_in_judge, run_here):
    # conf/eval/creative_tiny.yaml's header: shipped prompts, the stand-in judge (here on a
    # free port instead of 8001), only the model and the output folder given.
    out = tmp_path / "creative"
    printed = run_here(
        "eval_creative.py",
        "--config",
        "conf/eval/creative_tiny.yaml",
        f"generator.model={tiny_models[0]}",
        f"output_dir={out}",
        f"judge.base_url={stand_in_judge}",
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["judged"], summary["failed"], summary["items_total"]) == (4, 0, 4)
    assert f"summary: {out}/summary.json" in printed


def test_a_missing_prompts_file_is_one_line_exit_2_and_writes_nothing(tiny_models, tmp_path):
    out = tmp_path / "new-folder"
    proc = run_recipe(
        "eval_creative.py",
        "--config",
        "conf/eval/creative_tiny.yaml",
        f"generator.model={tiny_models[0]}",
        f"output_dir={out}",
        f"prompts={tmp_path / 'no-such.jsonl'}",
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"eval_creative: prompts file not found: {tmp_path / 'no-such.jsonl'}"
    ]
    assert not out.exists()  # no config.yaml, no folder
