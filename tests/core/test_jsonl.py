"""The shared input-JSONL reader: all bad lines reported with file:line."""

import json

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


def test_json_errors_are_whole_and_a_non_utf8_line_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    # line 2 holds a raw tab inside a string (a control character), line 3 a Latin-1 byte
    path.write_bytes(b'{"a": 1}\n{"a": "x\ty"}\n{"a": "caf\xe9"}\n{"a": 1,}\n')
    with pytest.raises(ValueError) as err:
        read_jsonl(path)
    lines = str(err.value).splitlines()[1:]
    assert lines == [
        # '{"a": "x' is 8 characters: the tab is column 9
        f"  {path}:2: not valid JSON: Invalid control character at (column 9)",
        # '{"a": "caf' is 10 bytes: 0xe9 is byte 11
        f"  {path}:3: not UTF-8 text: byte 0xe9 at column 11",
        f"  {path}:4: not valid JSON: Expecting property name enclosed in double quotes (column 9)",
    ]


def test_a_whole_json_file_error_names_file_line_and_column(tmp_path):
    from darling_nemo.jsonl import read_json

    path = tmp_path / "e.json"
    path.write_text('[\n  {"a": 1},\n  {"a" 2}\n]\n')
    with pytest.raises(ValueError) as err:
        read_json(path)
    assert str(err.value) == f"{path}:3: not valid JSON: Expecting ':' delimiter (column 8)"
    path.write_bytes(b'[\n"\xff"]\n')
    with pytest.raises(ValueError, match=rf"{path}:2: not UTF-8 text: byte 0xff"):
        read_json(path)
    path.write_text('{"a": [1, 2]}')
    assert read_json(path) == {"a": [1, 2]}


def test_eval_prompt_files_report_bad_bytes_with_file_and_line(tmp_path):
    from darling_nemo.evals.records import load_prompts
    from darling_nemo.schema import ConfigError

    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'{"id": 1, "prompt": "a"}\n{"id": 2, "prompt": "\xff"}\n')
    with pytest.raises(ConfigError, match=rf"{path}:2: not UTF-8 text: byte 0xff at column 22"):
        load_prompts(str(path), "prompt", "id", None)


@pytest.mark.parametrize("indent", [2, None], ids=["pretty-printed", "one-line"])
def test_a_json_array_file_is_named_as_such_in_one_line(tmp_path, indent):
    # a pretty-printed array of 8 objects gave 42 "not valid JSON" lines, one per line
    path = tmp_path / "array.jsonl"
    path.write_text(
        json.dumps([{"question": f"{k}+1?", "answer": str(k + 1)} for k in range(8)], indent=indent)
    )
    with pytest.raises(ValueError) as err:
        read_jsonl(path)
    assert str(err.value) == (
        f"{path} is a JSON array; JSONL wants one object per line (jq -c '.[]' prints it as JSONL)"
    )
    # a JSONL file whose lines are arrays is not one array: each line is named as before
    path.write_text("[1]\n[2]\n")
    with pytest.raises(ValueError, match=r"array.jsonl:2: expected a JSON object"):
        read_jsonl(path)
