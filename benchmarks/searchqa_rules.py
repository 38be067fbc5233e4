"""Search-QA: how much the action rules and Search-R1's scorer differ, on fuzzed output.

Prints:

1. **Action rules.** For fuzzed model turns, how often the ``"verl-agent"`` and
   ``"agentgym"`` rules (:mod:`agentgym.searchqa.tags`) read a different action (kind or
   content) from the default ``"search-r1"`` rule, set a different validity flag, and give
   a different reward for the gold answer "Paris". Two generators: *model-like* turns (a
   ``<think>`` block, then one to three tag blocks, with some upper-case tags, empty
   contents, unclosed tags and tags mentioned while thinking) and *tag soup* (random
   concatenations of tag fragments and words).
2. **Search-R1's scorer.** Episodes of model-like turns played in ``SearchQAEnv`` (default
   rule and turn budget); the transcript is Search-R1's layout (the real Search-R1 prompt,
   each turn cut at its stop point, each observation appended verbatim). Search-R1 scores
   the last of at least two ``<answer>`` blocks of prompt + transcript; the env scores the
   answer action. Counted: episodes where the two rewards differ, with the gold answer
   "Paris" and with "Beijing" (the example answer in Search-R1's prompt).
3. **Real questions** (when ../shared/data is present): how many questions of each QA file a
   trajectory that never answers would win under Search-R1's scorer (gold "Beijing").

Usage: ``python -m benchmarks.searchqa_rules [--turns N] [--episodes M]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

from agentgym.searchqa.data import QAItem, load_qa
from agentgym.searchqa.em import exact_match, normalize_answer
from agentgym.searchqa.env import SearchQAEnv
from agentgym.searchqa.tags import ACTION_RULES, cut_at_stop, parse_action
from retrieval.base import Document, SearchResult

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "search_r1_qa"
ROLLOUTS = SHARED / "rollout_samples" / "bamboogle_search_r1_base_intermediate_data.json"
WORDS = ["who", "founded", "the", "city", "in", "1812", "Paris", "Beijing", "bank", "is"]
ANSWERS = ["Paris", "paris.", "London", "the Paris", "Beijing", "Madison"]
MENTIONS = ["<search>", "<answer>", "<answer>Paris</answer>", "<search>bank</search>"]
SOUP = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<SEARCH>",
        "</Search>", "<Answer>", "</ANSWER>", "Paris", "bank", " ", "\n", "北京"]


def words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def model_like_turn(rng: random.Random) -> str:
    """One turn shaped like a small model's: mostly right, with the usual slips."""
    parts = []
    if rng.random() < 0.8:
        thought = words(rng, 3, 12)
        if rng.random() < 0.1:
            thought += " " + rng.choice(MENTIONS) + " " + words(rng, 0, 4)
        parts.append(f"<think>{thought}</think>")
    for _ in range(rng.choices([1, 2, 3], weights=[75, 17, 8])[0]):
        kind = rng.choice(["search", "answer"])
        tag = rng.choices([kind, kind.upper(), kind.title()], weights=[92, 4, 4])[0]
        if rng.random() < 0.04:
            content = rng.choice(["", " "])
        else:
            content = words(rng, 2, 7) if kind == "search" else rng.choice(ANSWERS)
        closing = f"</{tag}>" if rng.random() < 0.93 else ""
        parts.append(f"<{tag}> {content} {closing}")
    if rng.random() < 0.1:
        parts.append(words(rng, 1, 5))
    return rng.choice([" ", "\n", ""]).join(parts)


def tag_soup(rng: random.Random) -> str:
    return "".join(rng.choice(SOUP) for _ in range(rng.randint(0, 12)))


def reward(text: str, rule: str, gold: str) -> float:
    parsed = parse_action(text, rule)
    return float(parsed.kind == "answer" and exact_match(parsed.content, (gold,)))


def compare_rules(turns: int, seed: int) -> None:
    print(f"1. action rules against 'search-r1' on {turns:,} fuzzed turns per generator")
    for name, generate in (("model-like", model_like_turn), ("tag soup", tag_soup)):
        rng = random.Random(seed)
        texts = [generate(rng) for _ in range(turns)]
        base = [parse_action(t, "search-r1") for t in texts]
        base_rewards = [reward(t, "search-r1", "Paris") for t in texts]
        kinds = Counter(p.kind for p in base)
        print(f"   {name}: search-r1 reads {dict(kinds)}")
        for rule in ACTION_RULES[1:]:
            other = [parse_action(t, rule) for t in texts]
            pairs = list(zip(base, other, strict=True))
            action = sum((a.kind, a.content) != (b.kind, b.content) for a, b in pairs)
            valid = sum(a.well_formed != b.well_formed for a, b in pairs)
            rewards = sum(r != reward(t, rule, "Paris")
                          for r, t in zip(base_rewards, texts, strict=True))
            print(f"   {name}, {rule}: action differs {pct(action, turns)}, validity flag "
                  f"differs {pct(valid, turns)}, reward differs {pct(rewards, turns)}")


class FixedRetriever:
    """Three fixed passages for any query (no tags in them)."""

    documents = [Document(str(i), f"Title {i}\nPassage {i} about a bank in a city.")
                 for i in range(3)]

    def search(self, query: str, k: int) -> list[SearchResult]:
        return [SearchResult(d, 1.0) for d in self.documents[:k]]

    def batch_search(self, queries: list[str], k: int) -> list[list[SearchResult]]:
        return [self.search(q, k) for q in queries]


def search_r1_score(transcript: str, gold: str) -> float:
    """Search-R1's scorer with the quirk docs/envs/searchqa.md documents (measurement only, not the env's
    reward): the last ``<answer>`` block of the text, if the text holds at least two."""
    blocks = re.findall(r"<answer>(.*?)</answer>", transcript, re.DOTALL)
    return float(len(blocks) >= 2 and exact_match(blocks[-1].strip(), (gold,)))


def compare_scorer(episodes: int, seed: int) -> None:
    if not ROLLOUTS.is_file():
        print(f"2. skipped: {ROLLOUTS} not found (the real Search-R1 prompt)")
        return
    prompt = json.loads(ROLLOUTS.read_text(encoding="utf-8"))[0]["output"]["query"]
    question = prompt.split("Question: ", 1)[1].split("\n", 1)[0]
    print(f"2. Search-R1's scorer against the env's reward, {episodes:,} episodes per gold answer")
    for gold in ("Paris", "Beijing"):
        env = SearchQAEnv(qa_items=[QAItem("q", question, (gold,), "bench", "test")],
                          retriever=FixedRetriever())
        rng = random.Random(seed)
        counts: Counter[str] = Counter()
        for _ in range(episodes):
            env.reset(seed=0)
            transcript, env_reward, answered, done = prompt, 0.0, False, False
            while not done:
                turn = model_like_turn(rng)
                obs, step_reward, terminated, truncated, info = env.step(turn)
                done = terminated or truncated
                transcript += cut_at_stop(turn) + ("" if done else obs)
                env_reward += step_reward
                answered |= info["action_type"] == "answer"
            scored = search_r1_score(transcript, gold)
            counts["episodes"] += 1
            counts["never answered"] += not answered
            if scored != env_reward:
                counts["differ"] += 1
                counts["differ, never answered"] += not answered
                counts["Search-R1 higher"] += scored > env_reward
        print(f"   gold {gold!r}: rewards differ in {pct(counts['differ'], episodes)} "
              f"({counts['differ, never answered']:,} of them never answered; Search-R1 "
              f"higher in {counts['Search-R1 higher']:,}); episodes that never answer: "
              f"{pct(counts['never answered'], episodes)}")


def real_questions() -> None:
    files = sorted(SHARED.glob("*/*/test.*")) + sorted(SHARED.glob("search_r1/*.parquet"))
    if not files:
        print("3. skipped: no QA files under ../shared/data")
        return
    print("3. questions a trajectory that never answers wins under Search-R1's scorer")
    for path in files:
        items = load_qa(path)
        wins = sum(any(normalize_answer(a) == "beijing" for a in item.golden_answers)
                   for item in items)
        print(f"   {path.relative_to(SHARED)}: {wins} of {len(items):,}")


def pct(count: int, total: int) -> str:
    return f"{count:,} ({100 * count / total:.2f}%)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    compare_rules(args.turns, args.seed)
    compare_scorer(args.episodes, args.seed)
    real_questions()


if __name__ == "__main__":
    main()
