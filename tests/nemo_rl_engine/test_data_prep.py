"""darling-prep-math / darling-prep-wildchat on the data shipped in darling_nemo/resources and tmp files.

The output format is checked here with the `datasets` JSON loader NeMo-RL's ResponseDataset
uses; tests/nemo_rl_engine/test_nemo_rl_integration.py feeds it through NeMo-RL's own data pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path

from darling_nemo.data_prep import main_math, main_wildchat
from darling_nemo.resources import RESOURCES_DIR

DATA = RESOURCES_DIR


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_math_competition_sets_to_response_dataset(tmp_path, capsys):
    out = tmp_path / "val.jsonl"
    sources = [str(DATA / "math_eval" / f"{n}.jsonl") for n in ("aime25", "hmmt", "brumo")]
    assert main_math([*sources, "--out", str(out)]) == 0
    rows = read(out)
    assert len(rows) == 30 + 30 + 30
    assert "wrote 90 rows" in capsys.readouterr().out
    first = json.loads((DATA / "math_eval" / "aime25.jsonl").read_text().splitlines()[0])
    assert rows[0] == {
        "input": first["question"],
        "output": first["answer"],  # "70"
        "task_name": "math",
        "id": str(first["id"]),
    }
    assert all(set(r) == {"input", "output", "task_name", "id"} for r in rows)

    # The loader NeMo-RL's ResponseDataset calls: string columns, one row per line.
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(out))["train"]
    assert ds.num_rows == 90 and ds.column_names == ["input", "output", "task_name", "id"]


def test_olympiadbench_list_answers_and_dollar_signs(tmp_path):
    out = tmp_path / "ob.jsonl"
    assert main_math([str(DATA / "math_eval" / "olympiadbench.jsonl"), "--out", str(out)]) == 0
    rows = read(out)
    assert len(rows) == 675
    source = [json.loads(line) for line in (DATA / "math_eval" / "olympiadbench.jsonl").open()]
    # final_answer is a list: ["2"] -> "2"; ["$69$", "$84$"] -> "69, 84"
    by_id = {r["id"]: r for r in rows}
    for record in source:
        answers = record["final_answer"]
        expected = ", ".join(
            a[1:-1].strip() if a.startswith("$") and a.endswith("$") and "$" not in a[1:-1] else a
            for a in (x.strip() for x in answers)
        )
        assert by_id[str(record["id"])]["output"] == expected


def test_wildchat_prompts(tmp_path):
    out = tmp_path / "wc.jsonl"
    src = DATA / "noveltybench" / "wildchat-1k.jsonl"
    assert main_wildchat([str(src), "--out", str(out), "--limit", "10"]) == 0
    rows = read(out)
    source = [json.loads(line) for line in src.read_text().splitlines()[:10]]
    assert [r["input"] for r in rows] == [s["prompt"] for s in source]
    assert all(r["output"] == "" and r["task_name"] == "wildchat" for r in rows)
    assert rows[0]["id"] == source[0]["id"]


def test_parquet_json_and_chat_formats_with_dedup_shuffle_and_limit(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "p.parquet"
    pq.write_table(
        pa.table({"problem": ["1+1?", "2+2?", "1+1?"], "answer": ["2", "$4$", "2"]}), parquet
    )
    out = tmp_path / "math.jsonl"
    assert main_math([str(parquet), "--out", str(out)]) == 0
    assert [(r["input"], r["output"]) for r in read(out)] == [("1+1?", "2"), ("2+2?", "4")]

    # WildChat-1M style: the prompt is the first user turn of a conversation (JSON list file)
    chats = tmp_path / "chats.json"
    chats.write_text(
        json.dumps(
            [
                {
                    "conversation_hash": f"h{i}",
                    "conversation": [
                        {"role": "user", "content": f"prompt {i}"},
                        {"role": "assistant", "content": "reply"},
                    ],
                }
                for i in range(6)
            ]
        )
    )
    out = tmp_path / "chat.jsonl"
    args = [str(chats), "--out", str(out), "--shuffle-seed", "3", "--limit", "4"]
    assert main_wildchat(args) == 0
    rows = read(out)
    assert len(rows) == 4 and {r["input"] for r in rows} <= {f"prompt {i}" for i in range(6)}
    assert all(r["id"] == "h" + r["input"].split()[-1] for r in rows)
    assert main_wildchat(args) == 0
    assert read(out) == rows  # the same seed gives the same selection


def test_bad_rows_name_the_file_and_line(tmp_path, capsys):
    bad = write(tmp_path / "bad.jsonl", [{"problem": "1+1?", "answer": "2"}, {"problem": "x"}])
    assert main_math([str(bad), "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: no answer field" in err and "--answer-key" in err
    assert not (tmp_path / "o.jsonl").exists()

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "ok"}\n\n{not json\n[1]\n')  # every bad line, blank counted
    assert main_wildchat([str(broken), "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{broken}:3: not valid JSON" in err and f"{broken}:4: expected a JSON object" in err
    assert main_wildchat([str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "none.jsonl: no such file" in capsys.readouterr().err

    custom = write(tmp_path / "custom.jsonl", [{"q": "3*3?", "a": 9, "context": " Let x=3. "}])
    out = tmp_path / "c.jsonl"
    assert (
        main_math([str(custom), "--out", str(out), "--problem-key", "q", "--answer-key", "a"]) == 0
    )
    # a non-empty context (OlympiadBench's field) goes before the problem
    assert read(out)[0] == {
        "input": "Let x=3.\n\n3*3?",
        "output": "9",
        "task_name": "math",
        "id": f"{custom}:1",
    }


def test_prompts_over_the_token_budget_are_dropped(tmp_path):
    import string

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    tok.chat_template = "{% for m in messages %}U:{{ m['content'] }}{% endfor %}A:"
    tok.save_pretrained(tmp_path / "tok")
    template = tmp_path / "prompt.txt"
    template.write_text("Q {}")
    src = write(tmp_path / "s.jsonl", [{"prompt": "abc"}, {"prompt": "abcdef"}])
    out = tmp_path / "o.jsonl"
    # rendered "U:Q abc" + "A:" = 9 characters = 9 tokens; "abcdef" gives 12
    args = [str(src), "--out", str(out), "--tokenizer", str(tmp_path / "tok")]
    assert main_wildchat([*args, "--max-prompt-tokens", "10", "--prompt-file", str(template)]) == 0
    assert [r["input"] for r in read(out)] == ["abc"]
    assert main_wildchat([*args, "--max-prompt-tokens", "12", "--prompt-file", str(template)]) == 0
    assert len(read(out)) == 2
