"""The generated knowledge base: size, determinism, questions that need the passages, cache."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

from agentgym.searchqa.cache import default_cache_dir, knowledge_base_files
from agentgym.searchqa.data import load_qa
from agentgym.searchqa.em import normalize_answer
from agentgym.searchqa.knowledge_base import TEMPLATES, KnowledgeBase, generate_knowledge_base


def test_sizes_and_splits(kb: KnowledgeBase) -> None:
    assert len(kb.passages) >= 5000
    assert len(kb.questions) >= 2000
    hops = collections.Counter(q.metadata["hops"] for q in kb.questions)
    assert hops[1] >= 1000 and hops[2] >= 800
    splits = collections.Counter(q.split for q in kb.questions)
    assert set(splits) == {"train", "test"}
    assert 0.15 < splits["test"] / len(kb.questions) < 0.25
    assert {q.metadata["template"] for q in kb.questions} == {t.name for t in TEMPLATES}


def test_ids_titles_and_answers_are_unique(kb: KnowledgeBase) -> None:
    assert [p.id for p in kb.passages] == [str(i) for i in range(len(kb.passages))]
    titles = [p.title.lower() for p in kb.passages]
    assert len(set(titles)) == len(titles)
    assert len({q.id for q in kb.questions}) == len(kb.questions)
    assert len({q.question for q in kb.questions}) == len(kb.questions)
    for passage in kb.passages:
        assert re.fullmatch(r'"[^"\n]+"\n[^\n]+', passage.contents), passage.contents


def test_deterministic_by_seed() -> None:
    a = generate_knowledge_base(3, questions_per_template=5)
    b = generate_knowledge_base(3, questions_per_template=5)
    c = generate_knowledge_base(4, questions_per_template=5)
    assert a.passages == b.passages
    assert [(q.question, q.golden_answers, q.split, dict(q.metadata)) for q in a.questions] == [
        (q.question, q.golden_answers, q.split, dict(q.metadata)) for q in b.questions
    ]
    assert a.passages != c.passages


def test_questions_need_their_passages(kb: KnowledgeBase) -> None:
    by_id = {p.id: p for p in kb.passages}
    for q in kb.questions:
        (answer,) = q.golden_answers
        supporting = [by_id[i] for i in q.metadata["supporting_ids"]]
        assert len(supporting) == q.metadata["hops"]
        # The answer is never in the question and always in the last passage to read ...
        assert normalize_answer(answer) not in normalize_answer(q.question)
        assert answer in supporting[-1].text
        # ... the subject is named in the question and titles the first passage ...
        subject = q.metadata["entities"][0]
        assert subject in q.question and supporting[0].title == subject
        if q.metadata["hops"] == 2:
            # ... and a two-hop answer is not in the first passage, which names the bridge.
            bridge = q.metadata["entities"][1]
            assert answer not in supporting[0].text
            assert bridge in supporting[0].text and supporting[1].title == bridge
            assert bridge not in q.question


def test_small_counts() -> None:
    small = generate_knowledge_base(
        1,
        counts={
            "country": 3,
            "city": 10,
            "person": 60,
            "university": 5,
            "company": 10,
            "book": 10,
            "film": 10,
            "band": 5,
            "river": 3,
        },
        questions_per_template=2,
    )
    assert len(small.passages) == 116
    assert 0 < len(small.questions) <= 2 * len(TEMPLATES)


def test_cache_files_written_once_and_readable(tmp_path: Path, kb: KnowledgeBase) -> None:
    files = knowledge_base_files(0, tmp_path)
    assert files.directory.parent == tmp_path
    mtimes = (files.corpus_path.stat().st_mtime_ns, files.qa_path.stat().st_mtime_ns)
    again = knowledge_base_files(0, tmp_path)
    assert again == files
    assert (files.corpus_path.stat().st_mtime_ns, files.qa_path.stat().st_mtime_ns) == mtimes
    with files.corpus_path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    assert rows == [p.to_json() for p in kb.passages]
    items = load_qa(files.qa_path)
    assert items == list(kb.questions)
    assert items[0].metadata == kb.questions[0].metadata
    assert not list(files.directory.glob(".*"))  # no temporary files left behind


def test_default_cache_dir_follows_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "searchqa"
    monkeypatch.delenv("AGENTGYM_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "agentgym" / "searchqa"
