"""``AgentGym/EZPoints-v0``, ``AgentGym/NumberLine-v0``, ``AgentGym/Blackjack-v0``: gym-cards'
games as verl-agent's ``gym_cards`` package plays them, observed as visual envs.

Each game's deal, rules, rewards and end are gym-cards' (:mod:`.rules`), its action text
is read by verl-agent's ``gym_projection`` (:func:`.rules.read_action`), and its picture
has gym-cards' layout with our card faces (:mod:`.pictures`). Task ``"<game>-<seed>"``
deals what gym-cards' ``reset(seed=<seed>)`` deals; the default ids span verl-agent's
training seeds (0 to 65,534; it evaluates on seeds from 65,536 up, ``first_seed=65_536``).

* **Observation**: ``{"text", "image"}`` (:mod:`agentgym.visual`): a 300 x 300 frame and a
  sentence saying what it shows (EZPoints: also the formula so far, the one fact verl-agent's
  prompt adds to the picture).
* **Actions**: any text; verl-agent's rule reads it (the JSON answer its prompts ask for,
  ``{"thoughts": "...", "action": "hit"}``, or any text with ``"action":`` before the
  word). ``info["admissible_actions"]`` lists the game's words as the canonical answer
  ``{"action": "<word>"}``. Text the rule cannot read is invalid (``valid_action=False``):
  nothing happens, reward 0 (gym-cards' action -1). A readable action gym-cards refuses
  (an EZPoints number not on the cards, or used up) is valid and changes nothing, as there.
* **Episodes** end ``terminated`` where gym-cards' env says ``terminated`` (EZPoints: ``=``;
  NumberLine: the target reached; Blackjack: ``stand`` or a bust) and ``truncated`` after
  ``max_steps`` steps (every step counts; verl-agent's ``env.max_steps`` of
  ``run_ezpoints.sh`` 8, ``run_numberline.sh`` 10, ``run_blackjack.sh`` 15). gym-cards'
  own ``truncated`` (EZPoints: a formula longer than 5; NumberLine: 10 executed moves) is
  dropped, as verl-agent's ``GymCardsWorker.step`` drops it: the episode goes on (an
  EZPoints formula then takes no more characters; NumberLine keeps moving).
* **Info**: the contract keys and gym-cards' own (EZPoints ``Cards``, ``Numbers``,
  ``Formula``, ``won``; NumberLine ``Target``, ``Current``, ``won``; Blackjack
  ``Dealer Card``, ``Player Card``, ``won``), each a snapshot taken at that step.
* **Anchors**: ``"observation"`` is the frame's image anchor (verl-agent's anchor is the
  image); ``"state"`` is the game's true state (see each class).
* ``card_images``: a gym-cards checkout's ``gym_cards/envs/img`` folder, to draw the cards
  with its pictures: the frames are then gym-cards' pixel for pixel (where DejaVu fonts are
  installed, as gym-cards needs).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agentgym.core import AnchorMode, Transition
from agentgym.gym_cards import pictures
from agentgym.gym_cards.rules import (
    ACTION_WORDS,
    EZPOINTS_MAX_FORMULA,
    EZPOINTS_NUMBERS,
    EZPOINTS_OPERATORS,
    NUMBERLINE_MAX_POSITION,
    BlackjackDeck,
    Card,
    action_text,
    blackjack_reward,
    ezpoints_deal,
    ezpoints_reward,
    formula_text,
    hand_total,
    is_bust,
    number_allowed,
    numberline_reward,
    numberline_start,
    read_action,
    solve_ezpoints,
)
from agentgym.seeded_tasks import SeededTaskIds
from agentgym.tools import EnvTools, string_argument, tool
from agentgym.visual import VisualEnv, visual_observation_space

GAME_TOOL_DESCRIPTIONS = {
    "ezpoints": "Append one card number or operator to the formula; '=' ends it.",
    "numberline": "Move the current number one step down ('-') or up ('+').",
    "blackjack": "Take another card ('hit') or end your turn ('stand').",
}
"""What each game's ``play`` tool does, for the model."""


class GymCardsEnv(VisualEnv):
    """What the three games share (see the module docstring); subclasses set :attr:`game`
    and implement the game.

    Args:
        num_tasks: how many seeds (deals) ``task_ids`` spans.
        first_seed: the seed of the first task.
        card_images: draw cards with the pictures in this folder (a gym-cards checkout's
            ``gym_cards/envs/img``) instead of ours.
        anchor, max_steps: see :class:`~agentgym.core.TextEnv`.
        render_mode: ``None``, ``"rgb_array"`` or ``"ansi"``.

    Raises:
        ModuleNotFoundError: Pillow is missing (the ``vision`` extra).
    """

    game: ClassVar[str] = ""

    def __init__(self, *, num_tasks: int = 65_535, first_seed: int = 0,
                 card_images: str | Path | None = None, anchor: AnchorMode = "observation",
                 max_steps: int | None = None, render_mode: str | None = None):
        pictures.require_pillow()
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        self.faces = pictures.CardFaces(card_images)
        self.observation_space = visual_observation_space(pictures.FRAME, pictures.FRAME)
        self._task_ids = SeededTaskIds(self.game, first_seed, num_tasks)
        self._admissible = tuple(action_text(word) for word in ACTION_WORDS[self.game])

    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def seed_of(self, task_id: str) -> int:
        """The gym-cards seed that deals ``task_id``."""
        return self._task_ids.seed_of(task_id)

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools | None:
        """``play(word)``, one of the game's action words, written as the canonical answer
        ``{"action": "<word>"}`` that verl-agent's projection reads."""
        if not cls.game:
            return None
        return EnvTools((tool("play", GAME_TOOL_DESCRIPTIONS[cls.game],
                              '{{"action": "{word}"}}',
                              word=string_argument("The action word.",
                                                   ACTION_WORDS[cls.game])),))

    def admissible_actions(self) -> tuple[str, ...]:
        return self._admissible

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._deal(self.seed_of(task_id))
        return self._text(), self._original_info(won=False)

    def _step_text(self, action: str) -> Transition:
        index = read_action(action, self.game)
        if index is None:  # verl-agent's projection gives -1: gym-cards changes nothing
            return Transition(self._text(), valid_action=False,
                              info=self._original_info(won=False))
        reward, terminated = self._play(index)
        return Transition(self._text(), reward=reward, terminated=terminated,
                          info=self._original_info(won=reward > 0))

    # ------------------------------------------------------------------ per game
    def _deal(self, seed: int) -> None:
        raise NotImplementedError

    def _play(self, index: int) -> tuple[float, bool]:
        """Play action ``index`` of the game's list; (reward, terminated)."""
        raise NotImplementedError

    def _text(self) -> str:
        raise NotImplementedError

    def _original_info(self, *, won: bool) -> dict[str, Any]:
        raise NotImplementedError


class EZPointsEnv(GymCardsEnv):
    """Build a formula worth 12 from two cards, one character per step.

    Actions: ``1`` to ``10``, ``+``, ``*``, ``=``. A number is appended when a card shows
    it and it is not used up; ``=`` ends the episode and scores 10 when the formula (its
    characters joined, read by Python) is 12 and both cards were used, else 0. The picture
    writes the formula below the cards; the text is ``"The formula so far is '<formula>'."``
    with the characters joined as verl-agent's prompt joins them.

    ``"state"`` anchor: (cards, formula). Expert (:meth:`expert_action`): the first action
    of a shortest scoring continuation (:func:`~agentgym.gym_cards.rules.solve_ezpoints`).
    """

    game = "ezpoints"

    def __init__(self, *, num_tasks: int = 65_535, first_seed: int = 0,
                 card_images: str | Path | None = None, anchor: AnchorMode = "observation",
                 max_steps: int | None = 8, render_mode: str | None = None):
        super().__init__(num_tasks=num_tasks, first_seed=first_seed, card_images=card_images,
                         anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        self.cards: list[str] = []
        self.numbers: list[int] = []
        self.formula: list[int | str] = []
        self._used: list[int] = []
        self._won = False

    @property
    def task(self) -> str:
        return ("Build a formula that evaluates to 12 from the numbers of the two cards in "
                "the image (2 to 10 count their value, J, Q and K count 10, an ace counts "
                "1), one character per step: a card's number, '+', '*', or '=' to finish. "
                "Each card is used once. '=' scores 10 if the formula is 12 and both cards "
                "are used, else 0.")

    @property
    def success(self) -> bool:
        return self._won

    def state_key(self) -> Hashable:
        return (tuple(self.cards), tuple(self.formula))

    def expert_action(self) -> str | None:
        """The first action of a shortest formula completion that scores 10, as its
        canonical answer (``{"action": "7"}``); ``None`` when the episode is over or no
        completion scores."""
        if self.task_id is None or self._terminated or self._truncated:
            return None
        words = solve_ezpoints(self.numbers, self.formula)
        return None if words is None else action_text(words[0])

    def _deal(self, seed: int) -> None:
        self.cards, self.numbers = ezpoints_deal(seed)
        self.formula, self._used, self._won = [], [], False

    def _play(self, index: int) -> tuple[float, bool]:
        words = EZPOINTS_NUMBERS + EZPOINTS_OPERATORS
        chosen = words[index]
        if len(self.formula) > EZPOINTS_MAX_FORMULA:
            return 0.0, False  # gym-cards truncates here; verl-agent steps on
        if isinstance(chosen, int):
            if not number_allowed(chosen, self._used, self.numbers):
                return 0.0, False
            self._used.append(chosen)
        if chosen == "=":
            reward = ezpoints_reward(self.formula, self._used)
            self._won = reward > 0
            return reward, True
        self.formula.append(chosen)
        return 0.0, False

    def _text(self) -> str:
        return f"The formula so far is '{formula_text(self.formula)}'."

    def render_image(self) -> np.ndarray:
        return pictures.ezpoints_frame(self.cards, formula_text(self.formula, " "), self.faces)

    def _original_info(self, *, won: bool) -> dict[str, Any]:
        return {"Cards": list(self.cards), "Numbers": list(self.numbers),
                "Formula": list(self.formula), "won": bool(won)}


class NumberLineEnv(GymCardsEnv):
    """Move a number to a target, one step at a time.

    Actions: ``-`` (one down, not below 0) and ``+`` (one up, not above 5). Reward 1 on
    reaching the target (which ends the episode), -1 for a move that does not bring the
    number closer (a move against the bound included), else 0. The picture shows
    ``Target: <n>`` and ``Current: <n>``.

    ``"state"`` anchor: (target, current).
    """

    game = "numberline"

    def __init__(self, *, num_tasks: int = 65_535, first_seed: int = 0,
                 card_images: str | Path | None = None, anchor: AnchorMode = "observation",
                 max_steps: int | None = 10, render_mode: str | None = None):
        super().__init__(num_tasks=num_tasks, first_seed=first_seed, card_images=card_images,
                         anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        self.target = 0
        self.position = 0

    @property
    def task(self) -> str:
        return ("Bring the current number to the target number, both shown in the image: "
                "'+' adds one, '-' subtracts one (the numbers stay between 0 and 5).")

    @property
    def success(self) -> bool:
        return self.task_id is not None and self.position == self.target

    def state_key(self) -> Hashable:
        return (self.target, self.position)

    def _deal(self, seed: int) -> None:
        self.position, self.target = numberline_start(seed)

    def _play(self, index: int) -> tuple[float, bool]:
        before = self.position
        if index == 0 and self.position > 0:
            self.position -= 1
        elif index == 1 and self.position < NUMBERLINE_MAX_POSITION:
            self.position += 1
        return numberline_reward(before, self.position, self.target), self.success

    def _text(self) -> str:
        return "The image shows the target number and the current number."

    def render_image(self) -> np.ndarray:
        return pictures.numberline_frame(self.target, self.position)

    def _original_info(self, *, won: bool) -> dict[str, Any]:
        return {"Target": self.target, "Current": self.position, "won": bool(won)}


class BlackjackEnv(GymCardsEnv):
    """Blackjack against a dealer, from an infinite deck.

    Actions: ``stand`` (the dealer draws to 17 or more; reward 1 if the player's total
    beats the dealer's, else 0; the episode ends) and ``hit`` (one more card; going over 21
    ends the episode with 0). The picture shows the dealer's first card, a card back for
    the second, and the player's cards.

    ``"state"`` anchor: (dealer's cards, player's cards), each card (value, face, suit).
    """

    game = "blackjack"

    def __init__(self, *, num_tasks: int = 65_535, first_seed: int = 0,
                 card_images: str | Path | None = None, anchor: AnchorMode = "observation",
                 max_steps: int | None = 15, render_mode: str | None = None):
        super().__init__(num_tasks=num_tasks, first_seed=first_seed, card_images=card_images,
                         anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        self.dealer: list[Card] = []
        self.player: list[Card] = []
        self._deck: BlackjackDeck | None = None
        self._won = False

    @property
    def task(self) -> str:
        return ("Beat the dealer at blackjack: end closer to 21 than the dealer without "
                "going over. Cards 2 to 10 count their value, J, Q and K count 10, an ace "
                "counts 11 unless that takes the hand over 21, then 1. 'hit' takes one more "
                "card; 'stand' ends your turn and the dealer draws until reaching 17 or "
                "more. A win scores 1; a loss, a tie or going over 21 scores 0.")

    @property
    def success(self) -> bool:
        return self._won

    def state_key(self) -> Hashable:
        return (tuple(self.dealer), tuple(self.player))

    def player_total(self) -> int:
        return hand_total(self.player)

    def _deal(self, seed: int) -> None:
        self._deck = BlackjackDeck.for_seed(seed)
        self.dealer, self.player = self._deck.deal()
        self._won = False

    def _play(self, index: int) -> tuple[float, bool]:
        assert self._deck is not None
        if index == 1:  # hit
            self.player.append(self._deck.draw())
            return 0.0, is_bust(self.player)
        while hand_total(self.dealer) < 17:
            self.dealer.append(self._deck.draw())
        reward = blackjack_reward(self.player, self.dealer)
        self._won = reward > 0
        return reward, True

    def _text(self) -> str:
        return ("The image shows the dealer's cards at the top (the first face up, the "
                "second face down) and your cards at the bottom, left to right, five to a "
                "row.")

    def render_image(self) -> np.ndarray:
        return pictures.blackjack_frame(_card_name(self.dealer[0]),
                                        [_card_name(card) for card in self.player], self.faces)

    def _original_info(self, *, won: bool) -> dict[str, Any]:
        return {"Dealer Card": list(self.dealer), "Player Card": list(self.player),
                "won": bool(won)}


def _card_name(card: Card) -> str:
    """gym-cards' picture name of a card: suit + face (``"HQ"``, ``"C7"``, ``"SA"``)."""
    _, face, suit = card
    return f"{suit}{face}"
