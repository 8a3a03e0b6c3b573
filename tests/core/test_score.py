"""`darling-score` end to end: real files in, JSONL out, errors with file:line."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import REPO

from darling_nemo.score import main


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def run(argv: list[str]) -> tuple[int, list[dict]]:
    buf = io.StringIO()
    code = main(argv, stdout=buf)
    return code, [json.loads(line) for line in buf.getvalue().splitlines()]


def test_scores_hand_checked_group(tmp_path):
    # Classes {"4","4"}, {"four"}, {"2+2 is four"}: d = [2/3, 2/3, 1, 1];
    # quality [1, 1, 1, 0] -> reward [2/3, 2/3, 1, 0], mean 7/12 -> adv [1/12, 1/12, 5/12, -7/12].
    src = write_jsonl(
        tmp_path / "g.jsonl",
        [
            {
                "id": 7,
                "prompt": "2+2?",
                "responses": ["4", "4", "four", "2+2 is four"],
                "quality": [1, 1, 1, 0],
            }
        ],
    )
    code, (row,) = run([str(src)])
    assert code == 0
    assert row["id"] == 7  # input fields are kept
    assert row["class_ids"] == [0, 0, 1, 2]
    assert row["num_classes"] == 3
    assert row["pairs_total"] == 6 and row["pairs_judged"] == 0
    assert row["reward"] == pytest.approx([2 / 3, 2 / 3, 1, 0])
    assert row["advantage"] == pytest.approx([1 / 12, 1 / 12, 5 / 12, -7 / 12])


def test_set_overrides_darling_keys(tmp_path):
    # floor 0: a group of two identical answers has diversity 0, reward 0.
    src = write_jsonl(tmp_path / "g.jsonl", [{"responses": ["x", "x"], "quality": [1, 1]}])
    _, (row,) = run([str(src), "--set", "floor=0"])
    assert row["diversity"] == [0.0, 0.0]
    _, (row,) = run([str(src)])
    assert row["diversity"] == [0.1, 0.1]


def test_unknown_key_fails_with_its_path(tmp_path, capsys):
    src = write_jsonl(tmp_path / "g.jsonl", [{"responses": ["x"], "quality": [1]}])
    assert main([str(src), "--set", "flor=0"]) == 2
    assert "flor" in capsys.readouterr().err
    assert main([str(src), "--judge", "lexical", "--judge-set", "treshold=0.3"]) == 2
    assert "treshold" in capsys.readouterr().err


def test_malformed_lines_all_reported_and_nothing_written(tmp_path, capsys):
    src = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"responses": ["a", "b"], "quality": [1, 0]},
            "{not json",
            {"responses": ["a", "b"], "quality": [1]},
            {"responses": ["a"], "quality": [float("nan")]},
            {"quality": [1]},
        ],
    )
    out = tmp_path / "out.jsonl"
    assert main([str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{src}:2: not valid JSON" in err
    assert f"{src}:3: `quality` must be a list of 2 numbers" in err
    assert f"{src}:4: quality[0] = nan is not a finite number" in err
    assert f"{src}:5: missing field(s) responses" in err
    assert not out.exists()


def test_results_that_are_not_finite_are_refused_naming_the_line(tmp_path, capsys):
    # mean(1e308, 1e308) overflows to inf: the advantage was [-inf, -inf], written with
    # a RuntimeWarning and exit 0
    src = write_jsonl(
        tmp_path / "huge.jsonl",
        [
            {"responses": ["yes", "no"], "quality": [1, 0]},
            {"responses": ["yes", "no"], "quality": [1e308, 1e308]},
        ],
    )
    out = tmp_path / "out.jsonl"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([str(src), "-o", str(out)]) == 2
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"darling-score: {src}:2: advantage is not finite ([-inf, -inf])")
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("spelling", ["same", "dot-dot", "relative", "symlink"])
def test_output_that_is_the_input_is_refused_before_writing(
    tmp_path, capsys, spelling, monkeypatch
):
    src = write_jsonl(tmp_path / "g.jsonl", [{"responses": ["yes", "no"], "quality": [1, 0]}])
    before = src.read_text()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.jsonl").symlink_to(src)
    monkeypatch.chdir(tmp_path / "sub")
    output = {
        "same": str(src),
        "dot-dot": str(tmp_path / "sub" / ".." / "g.jsonl"),
        "relative": "../g.jsonl",
        "symlink": str(tmp_path / "link.jsonl"),
    }[spelling]
    assert main([str(src), "-o", output]) == 2
    err = capsys.readouterr().err
    assert f"--output: {output} is the input file {src}: name another file" in err
    assert src.read_text() == before


def test_console_script_runs_as_a_process(tmp_path):
    src = write_jsonl(tmp_path / "g.jsonl", [{"responses": ["yes", "no"], "quality": [1, 0]}])
    out = tmp_path / "o.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "darling_nemo.score", str(src), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 groups, 0/1 pairs judged (judge: lexical)" in proc.stderr
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    # "yes" vs "no": different short answers -> 2 classes, d = [1, 1]; reward [1, 0]; adv ±0.5.
    assert row["advantage"] == pytest.approx([0.5, -0.5])


def test_an_unreachable_classifier_server_is_one_clear_error(tmp_path, capsys):
    with socket.socket() as sock:  # a port nothing listens on: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    long_answers = [
        "Two plus two makes four, since adding two more to two gives four.",
        "Counting up from two by two steps lands on four, so the sum is four.",
    ]
    src = write_jsonl(tmp_path / "g.jsonl", [{"responses": long_answers, "quality": [1, 1]}])
    out = tmp_path / "out.jsonl"
    argv = [str(src), "-o", str(out), "--judge", "served"]
    argv += ["--judge-set", f"endpoints=[http://127.0.0.1:{port}]", "--judge-set", "max_attempts=1"]
    assert main(argv) == 2  # a dead endpoint is bad input, like a bad key (was exit 1)
    err = capsys.readouterr().err
    assert err.startswith("darling-score: judge failed:") and f"127.0.0.1:{port}" in err
    assert len(err.strip().splitlines()) == 1 and err.strip().endswith("(nothing written)")
    assert "Traceback" not in err and not out.exists()


def test_the_docs_example_where_the_semantic_judge_decides(tmp_path):
    """docs/core.md's cities example, as written there: at the default operating point the
    shipped MiniLM keeps all four answers apart; at the balanced one it joins the two Kyoto
    answers and keeps Amsterdam and Paris apart. All 6 pairs go to the judge: the
    short-answer rule applies only when both responses have at most 5 words, and only
    "Paris" does."""
    import re

    doc = (REPO / "docs" / "core.md").read_text()
    line = re.search(r"echo '(\{.*Kyoto.*\})' > cities.jsonl", doc).group(1)
    path = tmp_path / "cities.jsonl"
    path.write_text(line + "\n")
    for extra, classes in [([], [0, 1, 2, 3]), (["operating_point=balanced"], [0, 0, 1, 2])]:
        args = [str(path), "--judge", "embedding", *(a for x in extra for a in ("--judge-set", x))]
        code, rows = run(args)
        assert code == 0
        (row,) = rows
        assert row["class_ids"] == classes
        expected = (6, 6, len(set(classes)))
        assert (row["pairs_judged"], row["pairs_total"], row["num_classes"]) == expected


def test_the_rivals_through_darling_score(tmp_path, capsys):
    # "so \boxed{2}" and "thus \boxed{2}" are one answer to math-verify, "\boxed{3}" another,
    # "no" has none (its own class). outcome, coef 1, n = 4: the two 2s each have one repeat:
    # reward 1 - 1/4 = 0.75, 0.75, 0, 0; mean 0.375 -> advantage .375, .375, -.375, -.375.
    src = write_jsonl(
        tmp_path / "g.jsonl",
        [
            {
                "responses": ["so \\boxed{2}", "thus \\boxed{2}", "\\boxed{3}", "no"],
                "quality": [1, 1, 0, 0],
            }
        ],
    )
    _, (row,) = run([str(src), "--set", "method=outcome", "--set", "outcome_coef=1"])
    assert row["class_ids"] == [0, 0, 1, 2]
    assert row["advantage"] == pytest.approx([0.375, 0.375, -0.375, -0.375])
    assert "judge: math-verify answers" in capsys.readouterr().err
    # pass@k, n=4, c=2, k=2: +-1/sqrt(5) (tests/core/test_rivals.py works it out)
    _, (row,) = run([str(src), "--set", "method=pass_at_k", "--set", "k=2"])
    assert row["advantage"] == pytest.approx([5**-0.5, 5**-0.5, -(5**-0.5), -(5**-0.5)])
    # k above the group: one line naming the key, exit 2
    assert main([str(src), "--set", "method=pass_at_k", "--set", "k=9"]) == 2
    assert "darling.k=9 but a group has 4 responses" in capsys.readouterr().err
