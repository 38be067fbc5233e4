"""``AgentGym/SearchQA-v0``: answer questions by searching a corpus (Search-R1's protocol).

An episode is one question. The observation at reset is the raw question (no prompt
template). Each action is the model's whole tagged turn; the tag rule is in
:mod:`agentgym.searchqa.tags`:

* ``<search>query</search>`` -- the top ``top_k`` (3) passages come back as
  ``"\\n\\n<information>Doc 1(Title: t) text\\nDoc 2(Title: t) text\\n...</information>\\n\\n"``,
  byte for byte the text Search-R1 appends to its transcript after a search
  (:func:`information_observation`; ``Title`` is the passage's first line verbatim, quotes
  included, as in wiki-18; a passage without a newline is all title).
* ``<answer>x</answer>`` -- ends the episode (``terminated``) with reward 1.0 if ``x``
  exactly matches a gold answer after SQuAD normalization (:mod:`agentgym.searchqa.em`),
  else 0.0 (Search-R1's EM reward, Jin et al. 2025, Sec. 3.4). The observation is ``""``,
  as in Search-R1 (nothing follows an answer).
* anything else -- :data:`INVALID_ACTION_FEEDBACK`, a sentence in the model's own voice
  saying the action was not valid, how to search or answer, and that it will try again
  (Search-R1's feedback, in our words); ``valid_action=False``; nothing changes.

``action_rule`` picks how a turn is read (:mod:`agentgym.searchqa.tags`): ``"search-r1"``
(default), ``"verl-agent"`` (the GiGPO reference; several tags or CJK text set
``valid_action=False`` but the action is still executed) or ``"agentgym"``.

Turn budget (Search-R1's ``max_turns``): ``max_steps`` counts every action, answers and
invalid ones included, and the default 3 is Search-R1's training script (``max_turns=2``
turns that may search, then one final turn). As in Search-R1 the final turn may answer
but not search: a search there is not run, its observation is an empty
``<information></information>`` block, and the episode is truncated with reward 0.
``last_turn_searches=True`` runs that search too (verl-agent's loop, where every turn may
search; the GiGPO recipe uses ``max_steps=4``); the episode ends there either way, so
only ``info``, the ``"state"`` anchor and the retriever's load see the difference. A trajectory that never answers ends with
reward 0 here; Search-R1's scorer reads the last ``<answer>`` of prompt plus transcript,
a quirk ``docs/envs/searchqa.md`` documents and this env does not reproduce.

A retriever that fails (a server that is down) raises from :meth:`step`: that is an
infrastructure error, not a bad action, and the vector env reports it as such.

Info, beside the contract keys (``task`` is the question): ``data_source``,
``golden_answers`` (never shown in observations), ``retrieved_ids`` (ids returned by
this step's search; ``()`` otherwise), ``action_type`` (``"reset"``, ``"search"``,
``"answer"`` or ``"invalid"``) and ``answer`` (the parsed answer, else ``None``).

Anchors: ``"observation"`` is the returned text; ``"state"`` is
``(question, frozenset of passage ids retrieved so far)``, so two searches that return the
same passages in a different order, or an invalid action, leave the state unchanged.

Data. With no arguments the env plays the generated knowledge base
(:mod:`agentgym.searchqa.knowledge_base`: 5,100 passages, 2,509 questions), written to the
cache directory on first use, with a BM25 index over it built on first search (about a
second) and cached. BM25 is the default because a dense default would import torch and
sentence-transformers into every env worker and encode the corpus on CPU on first use;
the invented names of the knowledge base are rare tokens that lexical search finds well.
``retriever="dense"`` gives the dense retriever (default encoder all-MiniLM-L6-v2,
offline; E5 on request). Real data: ``data_path=`` a Search-R1/FlashRAG/verl QA file (or
folder of split files) and ``corpus_path=`` a JSONL corpus, or ``retriever=`` a server
URL or a :class:`~retrieval.base.Retriever` object.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from agentgym.core import AnchorMode, TagActions, TextEnv, Transition
from agentgym.searchqa.cache import knowledge_base_files
from agentgym.searchqa.data import QAItem, load_qa
from agentgym.searchqa.em import exact_match
from agentgym.searchqa.retrievers import (
    check_spec,
    is_url,
    make_retriever,
    server_unreachable,
)
from agentgym.searchqa.tags import (
    ACTION_RULES,
    DEFAULT_ACTION_RULE,
    TAG_ACTIONS,
    ActionRule,
    parse_action,
)
from agentgym.tools import EnvTools, string_argument, tool
from retrieval.base import Retriever, SearchResult

DEFAULT_RETRIEVER = "bm25"
"""Retriever of a default-constructed env (see the module docstring for why BM25)."""
SERVER_PROBE_TIMEOUT_S = 3.0
"""Seconds :meth:`SearchQAEnv.data_problems` waits for a retrieval server to accept a
connection."""
DEFAULT_TOP_K = 3
"""Passages returned per search (Search-R1 and the GiGPO recipe)."""
DEFAULT_MAX_STEPS = 3
"""Actions per episode before truncation: Search-R1's training script, ``max_turns=2``
turns that may search plus the final turn."""

INVALID_ACTION_FEEDBACK = (
    "\nThat action of mine was not valid. To search, I need to put my query inside "
    "<search> and </search>; to give my final answer, I need to put it inside <answer> "
    "and </answer>. I will try again.\n"
)
"""The observation after an invalid action: Search-R1's message (first person, framed by
newlines, ending with a promise to try again), reworded."""


def format_information(results: Sequence[SearchResult]) -> str:
    """Search-R1's block for a search: ``<information>Doc 1(Title: t) text ...</information>``.

    Each passage's ``contents`` is split at its first newline into the title (kept verbatim,
    quotes included) and the text; a passage without a newline is all title, with an empty
    text (``"Doc 1(Title: whole passage) "``). Lines are joined with ``"\\n"`` and the
    whole is stripped, as Search-R1 does.
    """
    lines = []
    for rank, result in enumerate(results, start=1):
        title, _, text = result.document.contents.partition("\n")
        lines.append(f"Doc {rank}(Title: {title}) {text}")
    return "<information>" + "\n".join(lines).strip() + "</information>"


def information_observation(results: Sequence[SearchResult]) -> str:
    """The observation for a search: :func:`format_information` between blank lines.

    ``"\\n\\n<information>...</information>\\n\\n"`` is, byte for byte, what Search-R1
    appends to its transcript after a ``</search>``; a transcript that appends observations
    verbatim reproduces Search-R1's.
    """
    return "\n\n" + format_information(results) + "\n\n"


SEARCHQA_TOOLS = EnvTools((
    tool("search", "Search the corpus; the top passages come back.", "<search>{query}</search>",
         query=string_argument("The search query.")),
    tool("answer", "Give the final answer to the question (ends the episode).",
         "<answer>{answer}</answer>", answer=string_argument("The answer, as short as possible."))))
"""Search-QA's actions as tools: ``search(query)`` -> ``<search>query</search>`` and
``answer(answer)`` -> ``<answer>answer</answer>``, the env's own tags, read by its
``action_rule``."""


class SearchQAEnv(TextEnv):
    """Search-augmented question answering on the Search-R1 protocol (module docstring).

    Args:
        data_path: a QA file or split folder (:func:`~agentgym.searchqa.data.load_qa`);
            ``None`` plays the generated knowledge base.
        corpus_path: JSONL corpus (``{"id", "contents"}`` lines) for ``"bm25"``/``"dense"``;
            ``None`` with no ``data_path`` uses the generated knowledge base's corpus.
        qa_items: questions given directly (instead of ``data_path``).
        retriever: a :class:`~retrieval.base.Retriever`, ``"bm25"``, ``"dense"`` or a
            retrieval server URL (:mod:`agentgym.searchqa.retrievers`).
        split: keep only this split (``"train"``/``"test"`` for the knowledge base).
        data_sources: keep only these data sources.
        limit: keep at most this many questions.
        top_k: passages per search.
        kb_seed: seed of the generated knowledge base.
        cache_dir: where the knowledge base and indexes are cached
            (default ``$AGENTGYM_CACHE/searchqa`` or ``~/.cache/agentgym/searchqa``).
        encoder: encoder for ``retriever="dense"`` (an ``Encoder`` or ``EncoderConfig``).
        action_rule: how a turn is read: ``"search-r1"``, ``"verl-agent"`` or
            ``"agentgym"`` (:mod:`agentgym.searchqa.tags`).
        last_turn_searches: run a search made on the last allowed step (``max_steps``);
            ``False`` is Search-R1's final answer turn (module docstring).
        anchor, max_steps, max_action_length, render_mode: see
            :class:`~agentgym.core.TextEnv`.

    Construction only checks arguments; questions are read on first use, the knowledge
    base is written and the index is built or loaded on first use too.
    """

    tools = SEARCHQA_TOOLS

    invalid_action_penalty: ClassVar[float] = 0.01
    """verl-agent's ``run_search.sh`` (``invalid_action_penalty_coef=0.01``)."""
    tag_actions: ClassVar[TagActions | None] = TAG_ACTIONS
    """``<search>`` / ``<answer>`` tags, read by Search-R1's rule."""

    @classmethod
    def task_source(cls, kwargs: dict[str, Any]) -> str:
        data = kwargs.get("data_path")
        return (f"Search-QA questions from {data}" if data else
                "the generated Search-QA knowledge base")

    @classmethod
    def data_problems(cls, kwargs: dict[str, Any]) -> list[str]:
        """Arguments the constructor refuses (it reads nothing), question files that do
        not exist, and a retrieval server that does not accept a connection within
        :data:`SERVER_PROBE_TIMEOUT_S`."""
        try:
            cls(**kwargs).close()
        except (FileNotFoundError, ValueError, TypeError) as error:
            return [str(error)]
        problems = []
        data = kwargs.get("data_path")
        paths = [data] if isinstance(data, (str, Path)) else list(data or ())
        problems += [f"Search-QA data_path {str(path)!r} does not exist: fetch the questions "
                     "with python -m agentgym.searchqa.download --out DIR --what qa"
                     for path in paths if not Path(path).expanduser().exists()]
        retriever = kwargs.get("retriever")
        if is_url(retriever):
            reason = server_unreachable(retriever, SERVER_PROBE_TIMEOUT_S)
            if reason is not None:
                problems.append(f"the retrieval server {retriever} does not answer ({reason}): "
                                "start it first (python -m retrieval.serve, docs/retrieval.md)")
        return problems


    def __init__(
        self,
        *,
        data_path: str | Path | Sequence[str | Path] | None = None,
        corpus_path: str | Path | None = None,
        qa_items: Sequence[QAItem] | None = None,
        retriever: Retriever | str = DEFAULT_RETRIEVER,
        split: str | None = None,
        data_sources: Sequence[str] | None = None,
        limit: int | None = None,
        top_k: int = DEFAULT_TOP_K,
        kb_seed: int = 0,
        cache_dir: str | Path | None = None,
        encoder: Any = None,
        anchor: AnchorMode = "observation",
        action_rule: ActionRule = DEFAULT_ACTION_RULE,
        last_turn_searches: bool = False,
        max_steps: int | None = DEFAULT_MAX_STEPS,
        max_action_length: int = 1 << 16,
        render_mode: str | None = None,
    ):
        super().__init__(
            anchor=anchor,
            max_steps=max_steps,
            max_action_length=max_action_length,
            render_mode=render_mode,
        )
        check_spec(retriever)
        if action_rule not in ACTION_RULES:
            raise ValueError(f"action_rule must be one of {ACTION_RULES}, got {action_rule!r}")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if data_path is not None and qa_items is not None:
            raise ValueError("give data_path or qa_items, not both")
        if qa_items is not None and len(qa_items) == 0:
            raise ValueError("qa_items is empty")
        uses_kb = data_path is None and qa_items is None
        if uses_kb and corpus_path is not None:
            raise ValueError(
                "corpus_path without data_path: the generated questions only make sense with "
                "the generated corpus; give data_path (or qa_items) for your corpus"
            )
        local = isinstance(retriever, str) and not is_url(retriever)
        if not uses_kb and local and corpus_path is None:
            raise ValueError(
                f"retriever={retriever!r} over your questions needs corpus_path (a JSONL "
                "corpus), or pass a Retriever object or a retrieval server URL"
            )
        if corpus_path is not None and not Path(corpus_path).is_file():
            raise FileNotFoundError(f"corpus file not found: {corpus_path}")
        self._data_path = data_path
        self._corpus_path = Path(corpus_path) if corpus_path is not None else None
        self._retriever_spec = retriever
        self._split = split
        self._data_sources = tuple(data_sources) if data_sources is not None else None
        self._limit = limit
        self.top_k = top_k
        self.action_rule: ActionRule = action_rule
        self.last_turn_searches = last_turn_searches
        self.kb_seed = kb_seed
        self._cache_dir = cache_dir
        self._encoder = encoder
        self._uses_kb = uses_kb
        self._items: tuple[QAItem, ...] | None = tuple(qa_items) if qa_items is not None else None
        self._by_id: dict[str, QAItem] = {}
        self._ids: tuple[str, ...] = ()
        self._retriever: Retriever | None = None
        self._item: QAItem | None = None
        self._retrieved: frozenset[str] = frozenset()
        self._correct = False
        if self._items is not None:
            self._index_items(self._items)

    # ------------------------------------------------------------------ lazy loading
    def _index_items(self, items: Sequence[QAItem]) -> None:
        by_id = {item.id: item for item in items}
        if len(by_id) != len(items):
            raise ValueError("question ids are not unique")
        self._items = tuple(items)
        self._by_id = by_id
        self._ids = tuple(item.id for item in items)

    def _load_items(self) -> None:
        if self._items is not None:
            return
        if self._uses_kb:
            files = knowledge_base_files(self.kb_seed, self._cache_dir)
            self._corpus_path = files.corpus_path
            paths: Any = files.qa_path
        else:
            paths = self._data_path
        items = load_qa(
            paths, split=self._split, data_sources=self._data_sources, limit=self._limit
        )
        self._index_items(items)

    @property
    def retriever(self) -> Retriever:
        """The retriever, built or loaded on first access."""
        if self._retriever is None:
            if self._uses_kb and self._corpus_path is None:
                self._corpus_path = knowledge_base_files(self.kb_seed, self._cache_dir).corpus_path
            self._retriever = make_retriever(
                self._retriever_spec,
                corpus_path=self._corpus_path,
                cache_dir=self._cache_dir,
                encoder=self._encoder,
            )
        return self._retriever

    @property
    def items(self) -> tuple[QAItem, ...]:
        """The questions this env plays, in task-id order."""
        self._load_items()
        assert self._items is not None
        return self._items

    # ------------------------------------------------------------------ the contract
    @property
    def task_ids(self) -> Sequence[str]:
        self._load_items()
        return self._ids

    @property
    def task(self) -> str:
        return self._item.question if self._item is not None else ""

    @property
    def success(self) -> bool:
        return self._correct

    @property
    def question(self) -> QAItem:
        """The current question (after :meth:`reset`)."""
        if self._item is None:
            raise RuntimeError("call reset() first")
        return self._item

    def state_key(self) -> Hashable:
        return (self.task, self._retrieved)

    def expert_action(self) -> str | None:
        """The privileged expert's next turn (it reads the gold answers and, on the
        generated knowledge base, the question's supporting passages and entity chain).

        On the generated knowledge base: search the question, then each later hop's
        bridge entity by name (``metadata["entities"][h]``, named in the passage of hop
        ``h - 1``), then answer the first gold answer -- answering as soon as every
        supporting passage has been retrieved, or on the last step (where a search would
        not run). A hop whose passage a search missed is searched again by its entity's
        name. On other data (no ``supporting_ids``): search the question once, then
        answer. ``None`` once the episode is over.

        Measured with BM25 on the knowledge base's ``train`` questions (500 drawn at
        random): the question's own text retrieves the first hop's passage every time,
        and the bridge entity's name the second hop's, so every two-hop question takes
        three turns: Search-R1's default budget (``max_steps=3``).
        """
        if self._item is None or self._terminated or self._truncated:
            return None
        item = self._item
        answer = f"<answer>{item.golden_answers[0]}</answer>"
        if self._on_last_step():
            return answer
        supporting = list(item.metadata.get("supporting_ids") or ())
        entities = list(item.metadata.get("entities") or ())
        if not supporting:
            return f"<search>{item.question}</search>" if self.elapsed_steps == 0 else answer
        missing = [hop for hop, passage in enumerate(supporting)
                   if passage not in self._retrieved]
        if not missing:
            return answer
        hop = missing[0]
        if (hop == 0 and self.elapsed_steps == 0) or hop >= len(entities):
            return f"<search>{item.question}</search>"
        return f"<search>{entities[hop]}</search>"

    def _extras(
        self,
        action_type: str,
        retrieved_ids: tuple[str, ...] = (),
        answer: str | None = None,
    ) -> dict[str, Any]:
        item = self.question
        return {
            "data_source": item.data_source,
            "golden_answers": item.golden_answers,
            "retrieved_ids": retrieved_ids,
            "action_type": action_type,
            "answer": answer,
        }

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._load_items()
        item = self._by_id.get(task_id)
        if item is None:
            raise KeyError(f"unknown task id {task_id!r} ({len(self._ids)} tasks)")
        self._item = item
        self._retrieved = frozenset()
        self._correct = False
        return item.question, self._extras("reset")

    def _on_last_step(self) -> bool:
        """Whether the action being stepped is the last one ``max_steps`` allows."""
        return self.max_steps is not None and self.elapsed_steps + 1 >= self.max_steps

    def _step_text(self, action: str) -> Transition:
        parsed = parse_action(action, self.action_rule)
        if parsed.kind == "invalid":
            return Transition(
                INVALID_ACTION_FEEDBACK, valid_action=False, info=self._extras("invalid")
            )
        if parsed.kind == "search":
            results: Sequence[SearchResult] = ()
            if self.last_turn_searches or not self._on_last_step():
                results = self.retriever.search(parsed.content, self.top_k)
            ids = tuple(result.document.id for result in results)
            self._retrieved = self._retrieved | frozenset(ids)
            return Transition(
                information_observation(results),
                valid_action=parsed.well_formed,
                info=self._extras("search", retrieved_ids=ids),
            )
        self._correct = exact_match(parsed.content, self.question.golden_answers)
        return Transition(
            "",
            reward=1.0 if self._correct else 0.0,
            terminated=True,
            valid_action=parsed.well_formed,
            info=self._extras("answer", answer=parsed.content),
        )


__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_RETRIEVER",
    "DEFAULT_TOP_K",
    "INVALID_ACTION_FEEDBACK",
    "SearchQAEnv",
    "format_information",
    "information_observation",
]
