"""The shared input-JSONL reader: all bad lines reported with file:line."""

import pytest

from darling_nemo.jsonl import read_jsonl


def test_reads_objects_and_skips_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]


def test_every_bad_line_is_named(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text('{"a": 1}\n{oops\n[1, 2]\n')
    with pytest.raises(ValueError) as err:
        read_jsonl(path)
    assert f"{path}:2: not valid JSON" in str(err.value)
    assert f"{path}:3: expected a JSON object" in str(err.value)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_line_numbers_count_blank_lines_and_scan_collects_problems(tmp_path):
    from darling_nemo.jsonl import read_jsonl_numbered, scan_jsonl

    path = tmp_path / "c.jsonl"
    path.write_text('\n{"a": 1}\n\n{oops\n"text"\n{"a": 2}\n')
    records, problems = scan_jsonl(path)  # never raises for bad lines
    assert records == [(2, {"a": 1}), (6, {"a": 2})]
    assert [n for n, _ in problems] == [4, 5]
    assert problems[1] == (5, "expected a JSON object")
    with pytest.raises(ValueError, match=rf"{path}:4: not valid JSON"):
        read_jsonl_numbered(path)
    path.write_text('\n{"a": 1}\n\n{"a": 2}\n')
    assert read_jsonl_numbered(path) == [(2, {"a": 1}), (4, {"a": 2})]
