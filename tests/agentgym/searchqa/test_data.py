"""QA file loading: formats, field fallbacks, splits, clear errors, real shared files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.searchqa.data import QADataError, QAItem, load_qa, read_qa_file, write_qa_jsonl
from tests.conftest import shared_data_path

SEARCH_R1_TEMPLATE = (
    "Answer the given question. ... For example, <answer> Beijing </answer>. "
    "Question: who wrote the iliad?\n"
)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_flashrag_jsonl(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "nq" / "test.jsonl",
        [
            {"id": "test_0", "question": "who wrote the iliad?", "golden_answers": ["Homer"]},
            {"id": "test_1", "question": "capital of france", "golden_answers": ["Paris", "paris"]},
        ],
    )
    items = load_qa(path)
    assert items[0] == QAItem("test_0", "who wrote the iliad?", ("Homer",), "nq", "test")
    assert items[1].golden_answers == ("Paris", "paris")


def test_verl_row_prompt_and_plain_ground_truth(tmp_path: Path) -> None:
    row = {
        "data_source": "bamboogle",
        "prompt": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Who founded X?"},
        ],
        "reward_model": {"ground_truth": "Ann Lee", "style": "rule"},
    }
    (item,) = load_qa(write_jsonl(tmp_path / "test.jsonl", [row]))
    assert (item.question, item.golden_answers, item.data_source) == (
        "Who founded X?",
        ("Ann Lee",),
        "bamboogle",
    )
    assert item.id == "test-0"


def test_search_r1_template_prompt_and_target(tmp_path: Path) -> None:
    row = {
        "data_source": "nq",
        "prompt": [{"role": "user", "content": SEARCH_R1_TEMPLATE}],
        "reward_model": {"ground_truth": {"target": ["Homer"]}, "style": "rule"},
        "extra_info": {"index": 3, "split": "train"},
    }
    (item,) = load_qa(write_jsonl(tmp_path / "data.jsonl", [row]))
    assert item.question == "who wrote the iliad?"
    assert item.golden_answers == ("Homer",)
    assert item.split == "train"


def test_hotpotqa_original_json_list(tmp_path: Path) -> None:
    path = tmp_path / "hotpot.json"
    path.write_text(
        json.dumps(
            [
                {
                    "_id": "5a8b",
                    "question": "Same nationality?",
                    "answer": "yes",
                    "type": "comparison",
                },
            ]
        )
    )
    (item,) = load_qa(path, data_source="hotpotqa")
    assert (item.id, item.golden_answers, item.data_source) == ("5a8b", ("yes",), "hotpotqa")


def test_numeric_answers_become_strings(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"question": "q?", "golden_answers": [1999, None]}])
    assert load_qa(path)[0].golden_answers == ("1999",)


def test_split_by_field(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "all.jsonl",
        [
            {
                "id": str(i),
                "question": f"q{i}",
                "golden_answers": ["a"],
                "split": "train" if i % 3 else "test",
            }
            for i in range(9)
        ],
    )
    assert [i.id for i in load_qa(path, split="test")] == ["0", "3", "6"]
    assert len(load_qa(path, split="train")) == 6
    with pytest.raises(QADataError, match=r"splits \['test', 'train'\]"):
        load_qa(path, split="dev")


def test_split_by_file_in_a_folder(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "ds" / "train.jsonl", [{"question": "t", "golden_answers": ["a"]}])
    write_jsonl(tmp_path / "ds" / "test.jsonl", [{"question": "s", "golden_answers": ["b"]}])
    (item,) = load_qa(tmp_path / "ds", split="test")
    assert (item.question, item.split, item.data_source) == ("s", "test", "ds")
    assert len(load_qa(tmp_path / "ds")) == 2
    with pytest.raises(QADataError, match="no file for split 'dev'"):
        load_qa(tmp_path / "ds", split="dev")


def test_data_source_filter_and_limit(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {
                "id": str(i),
                "question": "q",
                "golden_answers": ["a"],
                "data_source": "nq" if i % 2 else "hotpotqa",
            }
            for i in range(10)
        ],
    )
    items = load_qa(path, data_sources=["nq"], limit=3)
    assert [i.id for i in items] == ["1", "3", "5"]


def test_colliding_ids_across_files_are_prefixed(tmp_path: Path) -> None:
    a = write_jsonl(
        tmp_path / "nq" / "test.jsonl", [{"id": "test_0", "question": "a", "golden_answers": ["x"]}]
    )
    b = write_jsonl(
        tmp_path / "tq" / "test.jsonl", [{"id": "test_0", "question": "b", "golden_answers": ["y"]}]
    )
    assert [i.id for i in load_qa([a, b])] == ["nq:test_0", "tq:test_0"]


def test_roundtrip_through_write_qa_jsonl(tmp_path: Path) -> None:
    items = [QAItem("k1", "q?", ("a", "b"), "src", "train", {"hops": 2})]
    write_qa_jsonl(items, tmp_path / "out.jsonl")
    (back,) = load_qa(tmp_path / "out.jsonl")
    assert back == items[0]
    assert back.metadata == {"hops": 2}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q", "golden_answers": ["a"]}\n{not json}\n', r"bad\.jsonl:2: invalid JSON"),
        ('["a list"]\n', r"bad\.jsonl:1: expected a JSON object"),
        ('{"golden_answers": ["a"]}\n', r"row 0: no question .*keys \['golden_answers'\]"),
        ('{"question": "q"}\n', r"row 0: no gold answers"),
        ('{"question": "q", "golden_answers": []}\n', r"row 0: no gold answers"),
        ('{"question": "q", "golden_answers": ["  "]}\n', r"row 0: no gold answers"),
        ('{"question": "  ", "golden_answers": ["a"]}\n', r"row 0: no question"),
        ('{"id": 1, "question": "q", "golden_answers": ["a"]}\n' * 2, r"id '1' appears twice"),
    ],
)
def test_malformed_jsonl_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(QADataError, match=message):
        load_qa(path)


def test_missing_and_unsupported_files(tmp_path: Path) -> None:
    with pytest.raises(QADataError, match="not found"):
        load_qa(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(QADataError, match="unsupported file type"):
        load_qa(tmp_path / "x.csv")
    (tmp_path / "obj.json").write_text('{"a": 1}')
    with pytest.raises(QADataError, match="expected a JSON list"):
        load_qa(tmp_path / "obj.json")


def test_parquet_nested_fields(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "id": ["train_0", "train_1"],
            "question": ["who wrote the iliad?", "capital of france?"],
            "data_source": ["nq", "hotpotqa"],
            "reward_model": [
                {"ground_truth": {"target": ["Homer"]}, "style": "rule"},
                {"ground_truth": {"target": ["Paris"]}, "style": "rule"},
            ],
            "extra_info": [{"index": 0, "split": "train"}, {"index": 1, "split": "train"}],
        }
    )
    pq.write_table(table, tmp_path / "train.parquet")
    items = load_qa(tmp_path / "train.parquet")
    assert [(i.id, i.golden_answers, i.data_source) for i in items] == [
        ("train_0", ("Homer",), "nq"),
        ("train_1", ("Paris",), "hotpotqa"),
    ]


def test_corrupt_parquet_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(QADataError, match="not a readable parquet file"):
        load_qa(path)


# ------------------------------------------------------------------ real files (../shared/data)
@pytest.mark.data
def test_real_search_r1_parquet() -> None:
    pytest.importorskip("pyarrow")
    path = shared_data_path("search_r1_qa", "search_r1", "nq_search_test.parquet")
    items = load_qa(path)
    assert len(items) == 3610
    assert items[0].id == "test_0"
    assert items[0].data_source == "nq"
    assert all(item.golden_answers for item in items)
    assert "<search>" not in items[0].question  # the raw question, not the template


@pytest.mark.data
@pytest.mark.parametrize(
    ("parts", "rows", "source"),
    [
        (("search_r1_qa", "flashrag_format", "bamboogle", "test.jsonl"), 125, "bamboogle"),
        (("search_r1_qa", "flashrag_format", "popqa", "test.jsonl"), 1000, "popqa"),
        (("search_r1_qa", "verl_format", "musique", "test.jsonl"), 2417, "bdsaglam/musique"),
        (("hotpotqa", "rpt_hf_format", "dev.jsonl"), 300, "rpt_hf_format"),
        (
            ("hotpotqa", "hotpot_dev_distractor_v1.sample1143.original_format.json"),
            1143,
            "hotpot_dev_distractor_v1.sample1143.original_format",
        ),
    ],
)
def test_real_jsonl_and_json_files(parts: tuple[str, ...], rows: int, source: str) -> None:
    items = load_qa(shared_data_path(*parts))
    assert len(items) == rows
    assert {item.data_source for item in items} == {source}
    assert len({item.id for item in items}) == rows


@pytest.mark.data
def test_real_verl_parquet_without_question_column() -> None:
    pytest.importorskip("pyarrow")
    path = shared_data_path("search_r1_qa", "verl_format", "2wikimultihopqa", "test.parquet")
    items = list(read_qa_file(path))
    assert len(items) == 12576
    assert all(item.question and item.golden_answers for item in items)
