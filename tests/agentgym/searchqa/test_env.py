"""SearchQAEnv: scripted episodes, info, anchors, truncation, invalid actions, check_env, fuzz.

These tests use an in-test retriever (token overlap, ``overlap_retriever.py``) so they do not
depend on the retrieval package's backends; ``test_env_backends.py`` covers those.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.core import INFO_KEYS
from agentgym.searchqa.data import QAItem, load_qa
from agentgym.searchqa.env import (
    INVALID_ACTION_FEEDBACK,
    SearchQAEnv,
    format_information,
    information_observation,
)
from agentgym.searchqa.knowledge_base import KnowledgeBase
from retrieval.base import Document, SearchResult
from tests.agentgym.searchqa.overlap_retriever import OverlapRetriever, read_jsonl_corpus
from tests.conftest import shared_data_path

EXTRA_KEYS = ("data_source", "golden_answers", "retrieved_ids", "action_type", "answer")


def make_env(kb: KnowledgeBase, retriever: OverlapRetriever, **kwargs) -> SearchQAEnv:
    return SearchQAEnv(qa_items=kb.questions, retriever=retriever, **kwargs)


def first_of(kb: KnowledgeBase, template: str) -> QAItem:
    return next(q for q in kb.questions if q.metadata["template"] == template)


# ------------------------------------------------------------------ observation format
def test_format_information_matches_search_r1() -> None:
    # Search-R1 takes the first line as the title and the rest as the text, so a passage
    # without a newline is all title; in the middle it keeps the space before its line
    # break, at the end the final strip removes it.
    results = [
        SearchResult(Document("7", '"Ed Wood (film)"\nEd Wood is a 1994 film.\nMore.'), 3.0),
        SearchResult(Document("9", "  one line only "), 2.0),
        SearchResult(Document("4", "no title line here"), 1.0),
    ]
    assert format_information(results) == (
        '<information>Doc 1(Title: "Ed Wood (film)") Ed Wood is a 1994 film.\nMore.\n'
        "Doc 2(Title:   one line only ) \n"
        "Doc 3(Title: no title line here)</information>"
    )
    assert format_information([]) == "<information></information>"
    assert information_observation(results) == "\n\n" + format_information(results) + "\n\n"
    assert information_observation([]) == "\n\n<information></information>\n\n"


@pytest.mark.data
def test_format_information_reproduces_real_search_r1_rollouts() -> None:
    """Rebuild the documents of every <information> block in real Search-R1 rollouts and
    check that formatting them gives the block back byte for byte."""
    path = shared_data_path(
        "search_r1_qa", "rollout_samples", "bamboogle_search_r1_base_intermediate_data.json"
    )
    rollouts = json.loads(path.read_text(encoding="utf-8"))
    checked = 0
    for rollout in rollouts:
        for block in re.findall(
            r"<information>.*?</information>", rollout["output"]["final_response"], re.S
        ):
            inner = block[len("<information>") : -len("</information>")]
            documents = []
            for piece in re.split(r"(?:^|\n)Doc \d+\(Title: ", inner)[1:]:
                end = piece.index('") ') + 1 if piece.startswith('"') else piece.index(") ")
                title, text = piece[:end], piece[end + 2 :]
                documents.append(
                    SearchResult(Document(str(len(documents)), f"{title}\n{text}"), 0.0)
                )
            assert len(documents) == 3
            assert format_information(documents) == block
            checked += 1
    assert checked > 100


@pytest.mark.data
def test_search_observation_is_byte_equal_to_real_search_r1_transcripts() -> None:
    """In real Search-R1 rollouts, what follows each ``</search>`` up to the next turn is
    exactly the env's observation for the same passages, blank lines included."""
    path = shared_data_path(
        "search_r1_qa", "rollout_samples", "bamboogle_search_r1_base_intermediate_data.json"
    )
    checked = 0
    for rollout in json.loads(path.read_text(encoding="utf-8")):
        response = rollout["output"]["final_response"]
        for match in re.finditer(r"</search>(\n\n<information>(.*?)</information>\n\n)", response, re.S):
            documents = [
                SearchResult(Document(str(rank), title + "\n" + text), 0.0)
                for rank, (title, text) in enumerate(
                    re.findall(r'Doc \d+\(Title: ("[^\n]*?"|[^\n]*?)\) (.*?)(?=\nDoc \d+\(Title: |$)',
                               match.group(2), re.S)
                )
            ]
            assert information_observation(documents) == match.group(1)
            checked += 1
    assert checked == 125


# ------------------------------------------------------------------ scripted episodes (generated KB)
def test_single_hop_episode(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    item = first_of(kb, "book.author")
    env = make_env(kb, kb_retriever)
    obs, info = env.reset(options={"task_id": item.id})
    assert obs == item.question == info["task"]
    assert set(info) == set(INFO_KEYS) | set(EXTRA_KEYS)
    assert info["golden_answers"] == item.golden_answers
    assert (info["action_type"], info["retrieved_ids"], info["answer"]) == ("reset", (), None)
    assert info["data_source"] == "generated_kb"

    obs, reward, terminated, truncated, info = env.step(
        f"<think>Search it.</think><search>{item.question}</search>"
    )
    assert (reward, terminated, truncated, info["valid_action"]) == (0.0, False, False, True)
    assert obs.startswith("\n\n<information>Doc 1(Title: ")
    assert obs.endswith("</information>\n\n")
    assert obs.count("Doc ") == 3 and len(info["retrieved_ids"]) == 3
    assert item.metadata["supporting_ids"][0] in info["retrieved_ids"]
    assert item.golden_answers[0] in obs
    assert info["action_type"] == "search"

    obs, reward, terminated, truncated, info = env.step(
        f"<answer> {item.golden_answers[0].upper()} </answer>"
    )
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["success"] and info["valid_action"]
    assert info["answer"] == item.golden_answers[0].upper()
    assert obs == ""  # as in Search-R1: nothing follows an answer


def test_two_hop_episode_needs_two_searches(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    item = first_of(kb, "book.author.birth_city")
    subject_id, bridge_id = item.metadata["supporting_ids"]
    bridge, answer = item.metadata["entities"][1], item.golden_answers[0]
    env = make_env(kb, kb_retriever, anchor="state")
    env.reset(options={"task_id": item.id})
    obs, *_, info = env.step(f"<search>{item.question}</search>")
    assert subject_id in info["retrieved_ids"]
    assert bridge in obs
    obs, *_, info = env.step(f"<search>{bridge}</search>")
    assert bridge_id in info["retrieved_ids"]
    assert answer in obs
    assert info["anchor"][1] >= {subject_id, bridge_id}
    _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_wrong_answer_ends_with_zero(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    env = make_env(kb, kb_retriever)
    env.reset(seed=5)
    obs, reward, terminated, truncated, info = env.step("<answer>Nobody Atall</answer>")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    assert obs == "" and info["answer"] == "Nobody Atall"
    # The episode is over: further steps repeat the last observation with reward 0.
    assert env.step("<answer>x</answer>")[:4] == (obs, 0.0, True, False)


def test_scripted_agent_solves_most_questions(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    """Search the question, then the bridge entity, then answer what the passages say."""
    env = make_env(kb, kb_retriever)
    rng = np.random.default_rng(0)
    items = [kb.questions[int(i)] for i in rng.choice(len(kb.questions), 200, replace=False)]
    found = rewards = 0
    for item in items:
        env.reset(options={"task_id": item.id})
        observations = [env.step(f"<search>{item.question}</search>")[0]]
        if item.metadata["hops"] == 2:
            observations.append(env.step(f"<search>{item.metadata['entities'][1]}</search>")[0])
        seen = item.golden_answers[0] in " ".join(observations)
        found += seen
        answer = item.golden_answers[0] if seen else "?"
        _, reward, terminated, _, _ = env.step(f"<answer>{answer}</answer>")
        assert terminated
        rewards += reward
    assert found == rewards
    assert found >= 0.8 * len(items)


def test_turn_budget_is_search_r1s(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    """Default: 2 turns that search, then a final turn whose search is not run."""
    env = make_env(kb, kb_retriever, anchor="state")
    item = first_of(kb, "book.author")
    env.reset(options={"task_id": item.id})
    calls = kb_retriever.calls
    outcomes = [env.step(f"<search>{item.question}</search>") for _ in range(3)]
    assert [(o[1], o[2], o[3]) for o in outcomes] == [
        (0.0, False, False), (0.0, False, False), (0.0, False, True)
    ]
    assert kb_retriever.calls == calls + 2
    obs, _, _, _, info = outcomes[-1]
    assert obs == "\n\n<information></information>\n\n"
    assert (info["action_type"], info["retrieved_ids"], info["valid_action"]) == ("search", (), True)
    assert info["anchor"] == outcomes[0][4]["anchor"]  # nothing new was retrieved
    assert env.elapsed_steps == 3


def test_invalid_turns_count_towards_the_budget(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever)
    env.reset(seed=0)
    assert [env.step("no tags")[3] for _ in range(3)] == [False, False, True]


def test_last_turn_searches_option(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    env = make_env(kb, kb_retriever, last_turn_searches=True, max_steps=4)
    env.reset(seed=0)
    for turn in range(1, 5):
        obs, reward, terminated, truncated, info = env.step("<search>University</search>")
        assert (reward, terminated, truncated) == (0.0, False, turn == 4)
        assert len(info["retrieved_ids"]) == 3 and obs.count("(Title: ") == 3
    assert env.elapsed_steps == 4


def test_no_step_limit_never_reaches_a_last_turn(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever, max_steps=None)
    env.reset(seed=0)
    for _ in range(6):
        _, _, _, truncated, info = env.step("<search>University</search>")
        assert not truncated and len(info["retrieved_ids"]) == 3


def test_answer_on_the_last_turn_counts(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    env = make_env(kb, kb_retriever, max_steps=2)
    item = kb.questions[0]
    env.reset(options={"task_id": item.id})
    env.step("nonsense")
    _, reward, terminated, truncated, _ = env.step(f"<answer>{item.golden_answers[0]}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_invalid_action_feedback_changes_nothing(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever, anchor="state", max_steps=10)
    _, info0 = env.reset(seed=1)
    calls = kb_retriever.calls
    for action in ["I think it is Paris.", "<SEARCH>q</SEARCH>", "<search>unclosed", ""]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == INVALID_ACTION_FEEDBACK
        assert (reward, terminated, truncated, info["valid_action"]) == (0.0, False, False, False)
        assert info["action_type"] == "invalid" and info["retrieved_ids"] == ()
        assert info["anchor"] == info0["anchor"]
    assert kb_retriever.calls == calls  # nothing was searched


def test_invalid_action_feedback_is_a_first_person_retry() -> None:
    feedback = INVALID_ACTION_FEEDBACK
    assert feedback.startswith("\n") and feedback.endswith("\n")
    for needle in (" I ", " my ", "<search>", "</search>", "<answer>", "</answer>", "try again"):
        assert needle in feedback
    assert "My previous action is invalid" not in feedback  # our words, not Search-R1's


def test_empty_search_and_empty_answer_are_actions(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("<search>  </search>")
    assert (info["action_type"], info["valid_action"], terminated) == ("search", True, False)
    assert kb_retriever.queries[-1] == ""
    assert obs.startswith("\n\n<information>")
    obs, reward, terminated, _, info = env.step("<answer></answer>")
    assert (info["action_type"], info["answer"], reward, terminated) == ("answer", "", 0.0, True)


@pytest.mark.parametrize(
    ("rule", "first_step", "second_step"),
    [
        # Search-R1: the first block is the action and is valid; the first answer counts
        ("search-r1", ("search", 0.0, False, True), ("answer", 0.0, True, True)),
        # verl-agent: executed but flagged; its projection reads the first answer
        ("verl-agent", ("search", 0.0, False, False), ("answer", 0.0, True, False)),
        # ours: executed but flagged; the last answer counts
        ("agentgym", ("search", 0.0, False, False), ("answer", 1.0, True, False)),
    ],
)
def test_several_tags_by_rule(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever, rule: str, first_step, second_step
) -> None:
    item = first_of(kb, "film.director")
    env = make_env(kb, kb_retriever, action_rule=rule)
    env.reset(options={"task_id": item.id})
    obs, reward, terminated, _, info = env.step(
        f"<search>{item.question}</search><answer>{item.golden_answers[0]}</answer>"
    )
    assert (info["action_type"], reward, terminated, info["valid_action"]) == first_step
    assert obs.startswith("\n\n<information>")
    _, reward, terminated, _, info = env.step(
        f"<answer>wrong</answer> <answer>{item.golden_answers[0]}</answer>"
    )
    assert (info["action_type"], reward, terminated, info["valid_action"]) == second_step


def test_upper_case_tags_by_rule(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    item = kb.questions[0]
    for rule, kind in (("search-r1", "invalid"), ("verl-agent", "answer"), ("agentgym", "answer")):
        env = make_env(kb, kb_retriever, action_rule=rule)
        env.reset(options={"task_id": item.id})
        info = env.step(f"<ANSWER>{item.golden_answers[0]}</ANSWER>")[4]
        assert info["action_type"] == kind, rule


def test_non_string_and_oversized_actions(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever, max_action_length=100)
    env.reset(seed=2)
    obs, *_, info = env.step(12345)
    assert not info["valid_action"] and "expected text" in obs
    obs, *_, info = env.step("<search>" + "x" * 200 + "</search>")
    assert not info["valid_action"] and "longer than" in obs


def test_anchors(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    item = first_of(kb, "person.birth_city")
    observation_env = make_env(kb, kb_retriever)
    obs, info = observation_env.reset(options={"task_id": item.id})
    assert info["anchor"] == obs
    obs, *_, info = observation_env.step(f"<search>{item.question}</search>")
    assert info["anchor"] == obs

    state_env = make_env(kb, kb_retriever, anchor="state")
    _, info = state_env.reset(options={"task_id": item.id})
    assert info["anchor"] == (item.question, frozenset())
    *_, info = state_env.step(f"<search>{item.question}</search>")
    ids = frozenset(info["retrieved_ids"])
    assert info["anchor"] == (item.question, ids)
    # The same search again, or the same passages reached by another query: same state.
    *_, info = state_env.step(f"<search>{item.question}</search>")
    assert info["anchor"] == (item.question, ids)
    hash(info["anchor"])


def test_seeds_fix_the_task(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    env_a, env_b = make_env(kb, kb_retriever), make_env(kb, kb_retriever)
    tasks = [env_a.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert tasks == [env_b.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert len(set(tasks)) > 10
    with pytest.raises(KeyError, match="unknown task id"):
        env_a.reset(options={"task_id": "nope"})


def test_top_k(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    env = make_env(kb, kb_retriever, top_k=5)
    env.reset(seed=0)
    obs, *_, info = env.step("<search>University</search>")
    assert obs.count("(Title: ") == 5 and len(info["retrieved_ids"]) == 5


def test_split_and_limit_on_data_path(
    tmp_path, kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    from agentgym.searchqa.data import write_qa_jsonl

    write_qa_jsonl(kb.questions, tmp_path / "qa.jsonl")
    env = SearchQAEnv(
        data_path=tmp_path / "qa.jsonl", split="test", limit=50, retriever=kb_retriever
    )
    assert len(env.task_ids) == 50
    assert all(item.split == "test" for item in env.items)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"retriever": "bm2"}, ValueError, "retriever must be"),
        ({"retriever": 3}, TypeError, "retriever must be"),
        ({"top_k": 0}, ValueError, "top_k"),
        ({"action_rule": "search_r1"}, ValueError, "action_rule"),
        ({"corpus_path": "x.jsonl"}, ValueError, "corpus_path without data_path"),
        ({"data_path": "qa.jsonl"}, ValueError, "needs corpus_path"),
        (
            {"data_path": "qa.jsonl", "corpus_path": "/no/such/corpus.jsonl"},
            FileNotFoundError,
            "corpus",
        ),
        ({"qa_items": []}, ValueError, "empty"),
        ({"anchor": "text"}, ValueError, "anchor"),
    ],
)
def test_bad_construction(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        SearchQAEnv(**kwargs)


def test_construction_has_no_side_effects(isolated_cache) -> None:
    SearchQAEnv()
    SearchQAEnv(retriever="dense")
    SearchQAEnv(
        qa_items=[QAItem("a", "q?", ("x",), "s", "test")], retriever="http://127.0.0.1:9/retrieve"
    )
    assert not (isolated_cache / "searchqa").exists()


# ------------------------------------------------------------------ conformance and fuzzing
def test_check_env(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    for anchor in ("observation", "state"):
        check_env(make_env(kb, kb_retriever, anchor=anchor), skip_render_check=True)


FRAGMENTS = (
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<SEARCH>",
    "</Answer>",
    "<information>",
    "Doc 1(Title: x)",
    "who",
    "founded",
    " ",
    "\n",
    "\t",
    "北京",
    "Ærø",
    "🎵",
    "\u200b",
    "<",
    ">",
    "/",
    "the",
    "1999",
    "\x00",
    "\ud800",
)


def test_fuzzed_actions_never_raise(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    env = make_env(kb, kb_retriever, anchor="state")
    rng = np.random.default_rng(1234)
    for episode in range(60):
        env.reset(seed=episode)
        terminated = truncated = False
        while not (terminated or truncated):
            size = int(rng.integers(0, 12))
            action = "".join(FRAGMENTS[int(i)] for i in rng.integers(len(FRAGMENTS), size=size))
            obs, reward, terminated, truncated, info = env.step(action)
            assert isinstance(obs, str) and reward in (0.0, 1.0)
            assert env.observation_space.contains(obs)
            assert set(info) == set(INFO_KEYS) | set(EXTRA_KEYS)


def test_fuzzed_actions_with_hypothesis(kb: KnowledgeBase, kb_retriever: OverlapRetriever) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    env = make_env(kb, kb_retriever)
    tagged = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=10).map(
        "".join
    )

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(st.one_of(st.text(max_size=200), tagged))
    def step_never_raises(action: str) -> None:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str)
        assert info["valid_action"] in (True, False)
        assert reward == (1.0 if info["success"] else 0.0)

    step_never_raises()


# ------------------------------------------------------------------ the real HotpotQA corpus
@pytest.fixture(scope="module")
def hotpot() -> tuple[list[QAItem], dict, OverlapRetriever]:
    corpus = read_jsonl_corpus(
        shared_data_path("search_r1_qa", "hotpotqa_distractor_paragraphs_corpus.jsonl")
    )
    qa_path = shared_data_path(
        "hotpotqa", "hotpot_dev_distractor_v1.sample1143.original_format.json"
    )
    items = load_qa(qa_path, data_source="hotpotqa")
    supporting = {
        row["_id"]: sorted({title for title, _ in row["supporting_facts"]})
        for row in json.loads(qa_path.read_text(encoding="utf-8"))
    }
    return items, supporting, OverlapRetriever(corpus)


@pytest.mark.data
def test_hotpotqa_scripted_episodes(hotpot) -> None:
    items, supporting, retriever = hotpot
    env = SearchQAEnv(qa_items=items, retriever=retriever, anchor="state")
    titles_found = titles_total = 0
    rng = np.random.default_rng(7)
    for index in rng.choice(len(items), 60, replace=False):
        item = items[int(index)]
        obs, info = env.reset(options={"task_id": item.id})
        assert obs == item.question and info["data_source"] == "hotpotqa"
        for title in supporting[item.id][:2]:
            obs, reward, terminated, truncated, info = env.step(f"<search>{title}</search>")
            assert (reward, terminated, info["valid_action"]) == (0.0, False, True)
            titles_total += 1
            titles_found += f'(Title: "{title}")' in obs
        _, reward, terminated, truncated, info = env.step(
            f"<answer>{item.golden_answers[0]}</answer>"
        )
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
        assert len(info["anchor"][1]) >= 3
    assert titles_found >= 0.75 * titles_total


@pytest.mark.data
def test_hotpotqa_wrong_answer_and_truncation(hotpot) -> None:
    items, _, retriever = hotpot
    env = SearchQAEnv(qa_items=items, retriever=retriever)
    item = next(i for i in items if i.golden_answers == ("yes",))
    env.reset(options={"task_id": item.id})
    assert env.step("<answer>no</answer>")[1] == 0.0
    env.reset(options={"task_id": item.id})
    assert env.step("<answer>Yes.</answer>")[1] == 1.0
    env.reset(options={"task_id": item.id})
    outcomes = [env.step(f"<search>{item.question}</search>") for _ in range(3)]
    assert [o[3] for o in outcomes] == [False, False, True]
    assert all(o[1] == 0.0 for o in outcomes)


def test_importing_the_env_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, agentgym, agentgym.searchqa.env, agentgym.searchqa.download; "
        "heavy = {'torch', 'faiss', 'bm25s', 'sentence_transformers', 'transformers', 'pyarrow'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    from tests.conftest import REPO_ROOT

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ the privileged expert
def _expert_episode(env: SearchQAEnv, task_id: str) -> tuple[list[str], bool]:
    env.reset(options={"task_id": task_id})
    actions = []
    while (action := env.expert_action()) is not None:
        actions.append(action)
        env.step(action)
    return actions, env.success


def test_expert_searches_each_hop_then_answers(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever)
    two_hop = first_of(kb, "book.author.birth_city")
    bridge = two_hop.metadata["entities"][1]
    assert _expert_episode(env, two_hop.id) == (
        [f"<search>{two_hop.question}</search>", f"<search>{bridge}</search>",
         f"<answer>{two_hop.golden_answers[0]}</answer>"], True)
    one_hop = first_of(kb, "book.author")
    assert _expert_episode(env, one_hop.id) == (
        [f"<search>{one_hop.question}</search>",
         f"<answer>{one_hop.golden_answers[0]}</answer>"], True)
    assert env.expert_action() is None  # the episode is over


def test_expert_solves_the_knowledge_base_in_search_r1s_budget(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    env = make_env(kb, kb_retriever)  # max_steps 3: two searching turns, then an answer
    rng = np.random.default_rng(0)
    items = [kb.questions[int(i)] for i in rng.choice(len(kb.questions), 200, replace=False)]
    episodes = [_expert_episode(env, item.id) for item in items]
    assert all(success for _, success in episodes)
    # mostly one search per hop (a first search may bring the second hop's passage too);
    # where this test's word-overlap retriever misses a passage, a search by name finds it
    direct = [len(actions) <= item.metadata["hops"] + 1
              for (actions, _), item in zip(episodes, items, strict=True)]
    assert 0.95 * len(items) <= sum(direct) < len(items)


def test_expert_searches_a_missed_hop_by_name_and_answers_on_the_last_turn(
    kb: KnowledgeBase, kb_retriever: OverlapRetriever
) -> None:
    item = first_of(kb, "book.author")
    subject = item.metadata["entities"][0]
    env = make_env(kb, kb_retriever)
    env.reset(options={"task_id": item.id})
    env.step("<search>zzz</search>")  # a search that missed the subject's passage
    assert item.metadata["supporting_ids"][0] not in env.state_key()[1]
    assert env.expert_action() == f"<search>{subject}</search>"
    # on the last turn a search would not run: the expert answers whatever it has
    env.step("<search>zzz</search>")
    assert env.expert_action() == f"<answer>{item.golden_answers[0]}</answer>"


def test_expert_on_data_without_hops_searches_once_then_answers() -> None:
    item = QAItem(id="q1", question="Who wrote Hamlet?", golden_answers=("Shakespeare",),
                  data_source="nq", split="train")
    passages = (Document("0", '"Hamlet"\nHamlet is a tragedy by William Shakespeare.'),)
    env = SearchQAEnv(qa_items=(item,), retriever=OverlapRetriever(passages))
    assert _expert_episode(env, "q1") == (
        ["<search>Who wrote Hamlet?</search>", "<answer>Shakespeare</answer>"], True)
