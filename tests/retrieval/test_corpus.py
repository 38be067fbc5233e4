"""Corpus reading: both line layouts, ids, blank lines, and malformed lines with line numbers."""

from __future__ import annotations

import json

import pytest

from retrieval.base import Document
from retrieval.corpus import CorpusFormatError, count_corpus_lines, read_corpus, write_corpus
from retrieval.docstore import DocumentStore, DocumentStoreWriter


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_reads_search_r1_lines_and_title_text_lines(tmp_path):
    path = _write(
        tmp_path / "c.jsonl",
        [
            json.dumps({"id": "0", "contents": '"Evan Morris"\nEvan Morris was a lobbyist.'}),
            "",
            json.dumps({"id": 7, "title": "Ülm", "text": "A city.", "extra": 1}),
            json.dumps({"id": "x", "text": "No title here."}),
        ],
    )
    docs = list(read_corpus(path))
    assert docs == [
        Document("0", '"Evan Morris"\nEvan Morris was a lobbyist.'),
        Document("7", '"Ülm"\nA city.'),
        Document("x", "No title here."),
    ]
    assert docs[0].title == "Evan Morris" and docs[0].text == "Evan Morris was a lobbyist."
    assert docs[1].title == "Ülm"
    assert docs[2].title == "" and docs[2].text == "No title here."
    assert count_corpus_lines(path) == 3


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"id": "1", "contents": "ok"', "invalid JSON"),
        ('["id", "contents"]', "expected a JSON object"),
        ('{"contents": "no id"}', "missing 'id'"),
        ('{"id": null, "contents": "x"}', "'id' must be"),
        ('{"id": true, "contents": "x"}', "'id' must be"),
        ('{"id": "1", "contents": 5}', "'contents' must be a string"),
        ('{"id": "1", "title": "T"}', "expected 'contents' or 'title'/'text'"),
        ('{"id": "1", "title": 3, "text": "x"}', "must be strings"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    path = _write(
        tmp_path / "bad.jsonl", [json.dumps({"id": "0", "contents": "fine"}), "", bad_line]
    )
    reader = read_corpus(path)
    assert next(reader) == Document("0", "fine")  # streaming: good lines come first
    with pytest.raises(CorpusFormatError, match=message) as info:
        next(reader)
    assert f"{path}:3:" in str(info.value)


def test_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_corpus(tmp_path / "nope.jsonl"))


def test_write_then_read_roundtrip(tmp_path):
    docs = [Document(str(i), f'"T{i}"\nline with "quotes" and ünïcode {i}') for i in range(5)]
    assert write_corpus(docs, tmp_path / "out.jsonl") == 5
    assert list(read_corpus(tmp_path / "out.jsonl")) == docs


def test_document_store_random_access(tmp_path):
    docs = [Document(str(i), "é" * i + f"\ntext {i}") for i in range(50)]
    with DocumentStoreWriter(tmp_path / "s") as writer:
        writer.add_many(docs)
        assert len(writer) == 50
    store = DocumentStore.open(tmp_path / "s")
    assert len(store) == 50
    assert store[17] == docs[17]
    assert store.get_many([49, 0, 3]) == [docs[49], docs[0], docs[3]]
    with pytest.raises(IndexError):
        store[50]
    store.copy_to(tmp_path / "copy")
    assert DocumentStore.open(tmp_path / "copy")[49] == docs[49]


def test_document_store_detects_mismatched_files(tmp_path):
    with DocumentStoreWriter(tmp_path / "s") as writer:
        writer.add(Document("0", "zero"))
    with (tmp_path / "s" / "documents.jsonl").open("a") as handle:
        handle.write("garbage\n")
    with pytest.raises(ValueError, match="does not match"):
        DocumentStore.open(tmp_path / "s")
