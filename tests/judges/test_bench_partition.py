"""The partition benchmark: judged pairs of waves vs one call vs all pairs, on built groups,
human-labelled NoveltyBench pairs and synthetic repeated approaches."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from darling_nemo.bench.partition import (
    count_judged,
    human_label_groups,
    load_noveltybench_pairs,
    main,
    noisy,
    oracle,
    restaurant_sizes,
)

LONG = "is a long answer with more than five words"


def write_pairs(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def labelled_rows():
    """4 prompts: two pairs humans call similar, one not, one settled by the lexical rules."""
    return [
        {"prompt": "p0", "generation_0": f"zero a {LONG}", "generation_1": f"zero b {LONG}", "similar": 1},
        {"prompt": "p1", "generation_0": f"one a {LONG}", "generation_1": f"one b {LONG}", "similar": 1},
        {"prompt": "p2", "generation_0": f"two a {LONG}", "generation_1": f"two b {LONG}", "similar": 0},
        {"prompt": "p3", "generation_0": "Blue", "generation_1": "blue", "similar": 0},
    ]  # fmt: skip


def test_human_label_groups_hand_case(tmp_path):
    pairs = load_noveltybench_pairs(write_pairs(tmp_path / "p.jsonl", labelled_rows()))
    groups, judge = human_label_groups(pairs, 4, random.Random(0))
    assert len(groups) == 1 and sorted(groups[0]) == sorted(
        r[k] for r in labelled_rows() for k in ("generation_0", "generation_1")
    )
    counts = count_judged(groups, judge)
    # classes: {zero a, zero b}, {one a, one b}, {Blue, blue} (lexical: "blue" == "blue"),
    # two a, two b -> 5 classes. The lexical rule settles Blue/blue: 27 pairs left in one call.
    assert (counts.classes, counts.all_pairs, counts.one_call) == (5, 28, 27)
    # waves, judge transitive: cross-class pairs (28 - 3 in-class) + (8 - 5) joins - the one
    # lexical join that needs no judge = 25 + 3 - 1 = 27
    assert counts.waves == 27


def test_missing_pair_file_fails_with_where_to_find_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--groups", "2", "--pairs-data", str(tmp_path / "nope.jsonl")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "nope.jsonl: no such file" in err
    assert "darling_nemo/resources/noveltybench_similarity_train.jsonl" in err


def test_bad_pair_file_names_the_line(tmp_path, capsys):
    rows = labelled_rows()
    del rows[2]["similar"]
    with pytest.raises(SystemExit):
        main(["--pairs-data", str(write_pairs(tmp_path / "bad.jsonl", rows))])
    assert "bad.jsonl:3: missing field(s) similar" in capsys.readouterr().err


def test_bench_prints_all_three_tables(tmp_path, capsys):
    data = write_pairs(tmp_path / "p.jsonl", labelled_rows() * 2)
    assert main(["--groups", "4", "--seed", "1", "--pairs-data", str(data)]) == 0
    out = capsys.readouterr().out
    # one class of 8, no copies: the waves judge a spanning tree, 7 of 28 pairs, in one call
    one_class = next(line for line in out.splitlines() if line.startswith("1 class (8), 0%"))
    assert one_class.split()[5:11] == ["1.00", "28.0", "28.00", "7.00", "0.25", "1"]
    human = next(line for line in out.splitlines() if line.startswith("NoveltyBench"))
    assert human.split()[3:7] == ["5.00", "28.0", "27.00", "27.00"]
    assert "alpha 0.25, 11% errors" in out


@given(n=st.integers(1, 30), alpha=st.floats(0.01, 100), seed=st.integers(0, 1000))
def test_restaurant_sizes_partition_n(n, alpha, seed):
    sizes = restaurant_sizes(n, alpha, random.Random(seed))
    assert sum(sizes) == n and min(sizes) >= 1


def test_noisy_judge_is_deterministic_and_symmetric():
    pairs = [(f"class {k} x", f"class {k % 3} y") for k in range(200)]
    flipped = noisy(oracle, 0.11, seed=0)
    first = flipped(pairs)
    assert flipped(pairs) == first == flipped([(b, a) for a, b in pairs])
    errors = sum(p != q for p, q in zip(first, oracle(pairs), strict=True))
    assert 5 <= errors <= 45  # ~22 expected of 200; a sha256 draw, not a fixed pattern
    assert noisy(oracle, 0.0, 0)(pairs) == oracle(pairs)
    assert noisy(oracle, 1.0, 0)(pairs) == [1.0 - p for p in oracle(pairs)]
