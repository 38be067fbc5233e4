"""``AgentGym/WebShop-v0``: WebShop's text shopping task (Yao et al., NeurIPS 2022), no Java.

An episode: the agent reads a shopping instruction on the search page, searches, browses
results (10 per page, up to 50 hits), opens products, reads their sub-pages, picks
options and clicks "Buy Now". The purchase is scored with WebShop's formula
(:mod:`agentgym.webshop.reward`) and the episode ends.

**Actions** are WebShop's: ``search[keywords]`` and ``click[x]`` for a clickable ``x`` of
the page (lowercased labels, product ids, option values). By default they are read as
WebShop's text env reads them (``action_parsing="upstream"``): the text must start with
the verb ``search`` or ``click`` (exactly, lowercase) followed by ``[argument]``, where
the argument runs from the last ``[`` to the last ``]`` after it, lowercased, not stripped
(whatever follows that ``]`` is ignored); a search runs from any page (WebShop does not check for a
search bar), and ``click[search]`` is refused. ``action_parsing="lenient"`` accepts any
case of the verb and spaces around the action and the argument (stripped), and a search
only where the page has a search bar. ``info["admissible_actions"]`` lists the template
``"search[<your query>]"`` when the page has a search bar -- it stands for any keywords,
and stepping the template itself is invalid -- followed by ``click[x]`` for every
clickable. Anything else (an unknown click, empty keywords, free text) changes nothing:
the page is shown again with ``valid_action=False`` and reward 0.

**Pages** are WebShop's (see :mod:`agentgym.webshop.pages`); ``next_on_last_page``,
``drop_blank_texts``, ``reviews_placeholder`` and ``search_clickable`` switch its quirks
off or on. **Search** ranks as WebShop's pyserini index does (``ranking="lucene"``, see
:mod:`agentgym.webshop.lucene`); ``ranking="bm25s"`` is faster and orders differently.

**Reward.** ``reward="success"`` (default, the GiGPO recipe): ``success_reward`` (10)
when the purchase scores exactly 1, else 0. The score's option part follows
``option_match`` (``"upstream"``: WebShop's code as written; see
:mod:`agentgym.webshop.reward`). ``reward="score"``: the raw score in [0, 1].
``info["score"]`` always carries the raw score (0 before the purchase) and the step of
the purchase adds ``info["reward_info"]`` (the score's parts). ``success`` means a score
of exactly 1.

**Anchors.** ``"observation"``: the page text without the instruction block (the
reference's choice: the same page for different goals of a group is one anchor).
``"state"``: ``(page kind, query, results page, product, selected options, sub-page)``.

**Data.** ``data=None`` uses a generated catalog (:mod:`agentgym.webshop.catalog_gen`);
otherwise WebShop's files (:mod:`agentgym.webshop.data`). Goals, their fixed shuffle and
the train/dev/test split are described in :mod:`agentgym.webshop.goals`: ``reset(seed=s)``
draws a goal of this env's ``split`` only, so train and test never overlap whatever the
seeds. Catalog, search index and goals are shared by all envs of a process
(:mod:`agentgym.webshop.shop`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from agentgym.core import AnchorMode, TextEnv, Transition
from agentgym.tools import EnvTools, string_argument, tool
from agentgym.webshop import pages
from agentgym.webshop.actions import (
    ACTION_PARSINGS,
    SEARCH_PLACEHOLDER,
    ActionParsing,
    admissible_actions,
    parse_action,
)
from agentgym.webshop.browser import Browser
from agentgym.webshop.data import WebShopDataError, WebShopFiles
from agentgym.webshop.goals import (
    DEFAULT_PRICE_SEED,
    GOAL_SOURCES,
    SPLITS,
    Goal,
    GoalSource,
    GoalSplit,
    SplitName,
)
from agentgym.webshop.nouns import NounBackend, noun_extractor
from agentgym.webshop.reward import OPTION_MATCHES, OptionMatch, RewardInfo, webshop_score
from agentgym.webshop.search import StemmerChoice
from agentgym.webshop.shop import DataSource, RankingChoice, get_shop

RewardMode = Literal["success", "score"]
DEFAULT_MAX_STEPS = 15
"""Steps per episode in the GiGPO WebShop recipe."""
DEFAULT_SUCCESS_REWARD = 10.0


class WebShopEnv(TextEnv):
    """WebShop's text environment.

    Args:
        data: ``None`` (generated catalog), a directory with WebShop's files, a product
            file, or :class:`~agentgym.webshop.data.WebShopFiles`.
        num_products: generated catalog size (default 1,000), or keep the first
            ``num_products`` products of a real data set.
        goals: ``"synthetic"`` (default), ``"human"`` (the WebShop paper's setting; needs
            human instructions) or ``"all"``.
        split: ``"train"``, ``"dev"`` or ``"test"``: the goals this env draws from.
        goal_split: how the shuffled goals are cut (test 500, dev 1,000, train the rest).
        reward: ``"success"`` (``success_reward`` iff the score is 1) or ``"score"``.
        success_reward: reward of a perfect purchase in ``"success"`` mode.
        show_attributes: offer the "Attributes" sub-page (WebShop's ``show_attrs``).
        nouns: noun extraction for the type reward (``"auto"``, ``"spacy"``, ``"simple"``).
        catalog_seed: seed of the generated catalog.
        price_seed: seed of purchase prices in ranges and of goal price caps.
        ranking: ``"lucene"`` (pyserini's order, WebShop's) or ``"bm25s"``.
        stemmer: search stemming (``"auto"``, ``"porter"``, ``"none"``).
        option_match: ``"upstream"`` (WebShop's option reward as written) or ``"values"``.
        action_parsing: ``"upstream"`` (WebShop's) or ``"lenient"`` (see above).
        next_on_last_page, drop_blank_texts, reviews_placeholder, search_clickable: see
            :class:`~agentgym.webshop.pages.PageStyle` (defaults: WebShop's pages).
        anchor, max_steps, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    @classmethod
    def task_source(cls, kwargs: dict[str, Any]) -> str:
        data = kwargs.get("data")
        return f"WebShop data in {data}" if data else "the generated WebShop catalog"

    @classmethod
    def data_problems(cls, kwargs: dict[str, Any]) -> list[str]:
        """A ``data`` path that does not exist, or a folder without WebShop's product file
        (or with several); nothing is read but the folder's listing (the generated
        catalog needs no check)."""
        data = kwargs.get("data")
        if not data or isinstance(data, WebShopFiles):
            return []
        path = Path(data).expanduser()
        if not path.exists():
            return [f"WebShop data {str(path)!r} does not exist: download WebShop's data (its "
                    "setup.sh: items_shuffle.json, items_ins_v2.json, items_human_ins.json) "
                    "and pass that folder as the env's data"]
        if path.is_dir():
            try:
                WebShopFiles.find(path)
            except WebShopDataError as error:
                return [str(error)]
        return []


    def __init__(
        self,
        data: DataSource = None,
        *,
        num_products: int | None = None,
        goals: GoalSource = "synthetic",
        split: SplitName = "train",
        goal_split: GoalSplit | None = None,
        reward: RewardMode = "success",
        success_reward: float = DEFAULT_SUCCESS_REWARD,
        show_attributes: bool = False,
        nouns: NounBackend = "auto",
        catalog_seed: int = 0,
        price_seed: int = DEFAULT_PRICE_SEED,
        ranking: RankingChoice = "lucene",
        stemmer: StemmerChoice = "auto",
        option_match: OptionMatch = "upstream",
        action_parsing: ActionParsing = "upstream",
        next_on_last_page: bool = True,
        drop_blank_texts: bool = False,
        reviews_placeholder: bool = False,
        search_clickable: bool = True,
        anchor: AnchorMode = "observation",
        max_steps: int | None = DEFAULT_MAX_STEPS,
        render_mode: str | None = None,
    ):
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        if goals not in GOAL_SOURCES:
            raise ValueError(f"goals must be one of {GOAL_SOURCES}, got {goals!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if reward not in ("success", "score"):
            raise ValueError(f"reward must be 'success' or 'score', got {reward!r}")
        if option_match not in OPTION_MATCHES:
            raise ValueError(f"option_match must be one of {OPTION_MATCHES}, got {option_match!r}")
        if action_parsing not in ACTION_PARSINGS:
            raise ValueError(
                f"action_parsing must be 'upstream' or 'lenient', got {action_parsing!r}"
            )
        self.option_match: OptionMatch = option_match
        self.action_parsing: ActionParsing = action_parsing
        self.style = pages.PageStyle(
            next_on_last_page=next_on_last_page,
            drop_blank_texts=drop_blank_texts,
            reviews_placeholder=reviews_placeholder,
            search_clickable=search_clickable,
        )
        self.split: SplitName = split
        self.reward_mode: RewardMode = reward
        self.success_reward = float(success_reward)
        self.show_attributes = show_attributes
        self.shop = get_shop(
            data,
            num_products=num_products,
            catalog_seed=catalog_seed,
            price_seed=price_seed,
            ranking=ranking,
            stemmer=stemmer,
        )
        self.goal_table = self.shop.goal_table(goals, goal_split or GoalSplit())
        self._task_ids = self.goal_table.split_ids(split)
        if nouns not in ("auto", "spacy", "simple"):
            raise ValueError(f"nouns must be 'auto', 'spacy' or 'simple', got {nouns!r}")
        self.nouns: NounBackend = nouns
        self._goal: Goal | None = None
        self._browser = Browser(self.shop, self.style, show_attributes)
        self._score = 0.0

    # ------------------------------------------------------------------ contract
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    @property
    def task(self) -> str:
        return self._goal.instruction if self._goal is not None else ""

    @property
    def goal(self) -> Goal | None:
        """The goal of the current episode."""
        return self._goal

    @property
    def success(self) -> bool:
        return self._score == 1.0

    @property
    def page(self) -> pages.Page:
        """The page on screen."""
        return self._browser.page

    @property
    def current_asin(self) -> str | None:
        """The product whose page (or sub-page) is open, else ``None``."""
        return self._browser.asin

    @property
    def selected_options(self) -> Mapping[str, str]:
        """Option name -> value chosen on the open product (read-only view)."""
        return MappingProxyType(self._browser.options)

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools:
        """WebShop's two actions: ``search(query)`` -> ``search[query]`` and
        ``click(target)`` -> ``click[target]``."""
        return EnvTools((
            tool("search", "Search the shop (from a page with a search bar).",
                 "search[{query}]", query=string_argument("The search keywords.")),
            tool("click", "Click something clickable on the page: a product id, an "
                          "option value, 'buy now', 'back to search', 'next >', '< prev', "
                          "or a product page's 'description', 'features' or 'reviews'.",
                 "click[{target}]", target=string_argument(
                     "The clickable's text, as the page shows it (lowercased)."))))

    def admissible_actions(self) -> tuple[str, ...]:
        return admissible_actions(self._browser.page)

    def expert_action(self) -> str | None:
        """The privileged oracle's next action (:func:`agentgym.webshop.oracle.oracle_action`:
        search the instruction, page to the target, open it, click each goal option, buy);
        ``None`` once the episode is over or when the target cannot be reached."""
        from agentgym.webshop.oracle import oracle_action

        if self._goal is None or self._terminated or self._truncated:
            return None
        return oracle_action(self)

    def state_key(self) -> Hashable:
        return self._browser.state_key()

    def observation_anchor(self, observation: str) -> Hashable:
        page = self._browser.page
        if observation == page.text:
            return page.text_without_instruction
        return observation

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        try:
            index = self.goal_table.index_of(task_id)
        except KeyError:
            raise ValueError(f"unknown WebShop task id {task_id!r}") from None
        goal_split = self.goal_table.split_of(index)
        if goal_split != self.split:
            raise ValueError(
                f"task {task_id!r} belongs to the {goal_split!r} split, not {self.split!r}"
            )
        self._goal = self.goal_table.goal(index)
        self._browser.start(self._goal.instruction)
        self._score = 0.0
        return self._browser.page.text, {"score": 0.0}

    def _step_text(self, action: str) -> Transition:
        parsed = parse_action(action, self.action_parsing)
        if parsed is None:
            return self._invalid()
        verb, argument = parsed
        page = self._browser.page
        if verb == "search":
            if not argument or f"search[{argument.strip()}]" == SEARCH_PLACEHOLDER:
                return self._invalid()
            if self.action_parsing == "lenient" and not page.has_search_bar:
                return self._invalid()
            self._browser.search(argument)
            return self._valid()
        if verb != "click" or argument == "search" or argument not in page.clickables:
            return self._invalid()
        if argument == pages.BUY_NOW.lower():
            return self._buy()
        self._browser.click(argument)
        return self._valid()

    def _buy(self) -> Transition:
        asin = self._browser.asin
        assert self._goal is not None and asin is not None
        product = self.shop.product(asin)
        info = webshop_score(
            product,
            self._goal,
            price=self.shop.price(asin),
            options=self._browser.options,
            nouns=noun_extractor(self.nouns),  # spaCy loads on the first purchase
            option_match=self.option_match,
        )
        self._score = info.score
        self._browser.show_done(info.score)
        if self.reward_mode == "score":
            reward = info.score
        else:
            reward = self.success_reward if info.score == 1.0 else 0.0
        return Transition(
            observation=self._browser.page.text,
            reward=reward,
            terminated=True,
            info={"score": info.score, "reward_info": _reward_info(info, asin)},
        )

    def _valid(self) -> Transition:
        return Transition(observation=self._browser.page.text, info={"score": self._score})

    def _invalid(self) -> Transition:
        return Transition(
            observation=self._browser.page.text, valid_action=False, info={"score": self._score}
        )


def _reward_info(info: RewardInfo, asin: str) -> dict[str, Any]:
    return {"purchased_asin": asin, **asdict(info)}
