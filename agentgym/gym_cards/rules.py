"""The rules of gym-cards' EZPoints, NumberLine and Blackjack, and verl-agent's action reading,
as pure functions (no pictures; those are in :mod:`agentgym.gym_cards.pictures`).

Facts from the gym-cards package that verl-agent ships
(``agent_system/environments/env_package/gym_cards``), each checked against its code by
``tests/agentgym/test_gym_cards_verl_agent.py``:

* **Reading an action** (verl-agent's ``gym_projection``, :func:`read_action`): the text is
  lower-cased and cut at the first ``"action":`` (the key of the JSON answer its prompts
  ask for); everything from there on is searched. Where there is no such key, ``find``
  gives -1 and only the *last character* of the text is searched (so a bare ``3`` is read
  as ``3``, a bare ``10`` as ``0``, i.e. not at all, and a bare ``hit`` as ``t``). In
  EZPoints (and Points24), ``10`` is taken out first and counts as the action ``10``. The
  action is valid when exactly one distinct word of the game's list
  (:data:`ACTION_WORDS`) occurs in the searched text, else invalid.
* **EZPoints** (:func:`ezpoints_deal`): Python's ``random`` seeded with the seed draws a
  rank from 2 to 13 and a suit; its value is the rank, J/Q/K counting 10. If that value is
  1, 2, 3, 4 or 6, with probability 1/2 (one more ``random()`` draw) the second value is
  ``12 // value``, else ``12 - value``; the second card's suit is drawn; with probability
  1/2 the two cards swap places. Card names are suit + rank (``"H7"``, ``"DT"``, ``"SK"``).
* **NumberLine** (:func:`numberline_start`): Python's ``random`` seeded with the seed
  draws the start and the target from 0 to 5; if they are equal the target becomes
  ``(target + 1) % 5``.
* **Blackjack** (:class:`BlackjackDeck`): NumPy's generator seeded as Gymnasium seeds an
  env (``PCG64(SeedSequence(seed))``) deals two cards to the dealer, then two to the
  player, each as a value from ``[1..10, 10, 10, 10]``, a suit from C/D/H/S and, for a
  10, a face from J/Q/K; then one more suit and, when the dealer's first card is a 10, one
  more face are drawn and not used. A player's loss scores 0, not -1 (the comparison is
  clamped at 0).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from gymnasium.utils import seeding

EZPOINTS_TARGET = 12
EZPOINTS_NUMBERS: tuple[int, ...] = tuple(range(1, 11))
EZPOINTS_OPERATORS: tuple[str, ...] = ("+", "*", "=")
EZPOINTS_MAX_FORMULA = 5
"""A formula longer than this takes no more characters (gym-cards truncates the episode)."""
NUMBERLINE_MAX_POSITION = 5
BLACKJACK_DECK: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10)
SUITS: tuple[str, ...] = ("H", "S", "D", "C")
"""EZPoints' suit order (Blackjack draws from C, D, H, S)."""

ACTION_WORDS = MappingProxyType({
    "ezpoints": tuple(str(n) for n in EZPOINTS_NUMBERS) + EZPOINTS_OPERATORS,
    "numberline": ("-", "+"),
    "blackjack": ("stand", "hit"),
})
"""Each game's action list, in the order of its action indices (verl-agent's
``gym_projection``)."""


def read_action(text: str, game: str) -> int | None:
    """The index into ``ACTION_WORDS[game]`` that verl-agent's ``gym_projection`` reads in
    ``text``; ``None`` where it finds none or several (an invalid action).

    Args:
        text: what the agent wrote (verl-agent passes the whole response).
        game: ``"ezpoints"``, ``"numberline"`` or ``"blackjack"``.
    """
    words = ACTION_WORDS[game]
    lowered = text.lower()
    searched = lowered[lowered.find('"action":'):]  # -1 when absent: the last character
    found = set()
    if game == "ezpoints" and "10" in searched:
        found.add("10")
        searched = searched.replace("10", "")
    found.update(word for word in words if word in searched)
    if len(found) != 1:
        return None
    return words.index(found.pop())


def action_text(word: str) -> str:
    """The canonical answer for the action ``word``: ``{"action": "<word>"}``, which
    :func:`read_action` reads as ``word`` in every game."""
    return f'{{"action": "{word}"}}'


# ---------------------------------------------------------------------- EZPoints
def rank_name(rank: int) -> str:
    """gym-cards' rank letter: A, 2-9, T, J, Q, K."""
    return {1: "A", 10: "T", 11: "J", 12: "Q", 13: "K"}.get(rank, str(rank))


def ezpoints_deal(seed: int | None) -> tuple[list[str], list[int]]:
    """The two cards of EZPoints for ``seed`` and their numbers (gym-cards' ``reset``):
    ``(["H7", "S5"], [7, 5])``."""
    rng = random.Random(seed)
    first = rng.randint(2, 13)
    cards = [rng.choice(SUITS) + rank_name(first)]
    numbers = [min(first, 10)]
    if numbers[0] in (1, 2, 3, 4, 6) and rng.random() <= 0.5:
        numbers.append(EZPOINTS_TARGET // numbers[0])
    else:
        numbers.append(EZPOINTS_TARGET - numbers[0])
    cards.append(rng.choice(SUITS) + rank_name(numbers[1]))
    if rng.random() <= 0.5:
        cards.reverse()
        numbers.reverse()
    return cards, numbers


def formula_text(formula: Sequence[int | str], separator: str = "") -> str:
    """The formula's characters joined (``""``: as verl-agent's prompt shows it; ``" "``:
    as gym-cards' picture writes it)."""
    return separator.join(str(element) for element in formula)


def evaluate_formula(formula: Sequence[int | str]) -> int | float | None:
    """The value of the formula as Python reads its characters joined (``"3*+4"`` is 12,
    ``"34"`` is 34); ``None`` when that is not an expression. Only numbers, ``+`` and
    ``*`` ever enter a formula, so nothing but arithmetic is evaluated."""
    text = formula_text(formula)
    if not set(text) <= set("0123456789+*"):
        raise ValueError(f"not an EZPoints formula: {text!r}")
    try:
        return eval(text, {"__builtins__": {}}, {})  # noqa: S307 (digits, + and * only)
    except Exception:  # as gym-cards: any failure scores 0
        return None


def number_allowed(number: int, used: Sequence[int], numbers: Sequence[int]) -> bool:
    """gym-cards' check: no number used more often than the cards show it."""
    after = [*used, number]
    return not any(after.count(x) > list(numbers).count(x) for x in after)


def ezpoints_reward(formula: Sequence[int | str], used: Sequence[int]) -> float:
    """10 when the formula evaluates to 12 and both cards were used, else 0."""
    if len(used) != 2:
        return 0.0
    return 10.0 if evaluate_formula(formula) == EZPOINTS_TARGET else 0.0


def solve_ezpoints(numbers: Sequence[int], formula: Sequence[int | str]) -> list[str] | None:
    """The shortest list of EZPoints action words that, appended to ``formula``, scores
    10 (the last word is ``"="``); ties go to the earlier words of ``ACTION_WORDS``.
    ``None`` when no continuation scores (a card used in a way no formula recovers from).

    Breadth-first over formulas: only the cards' numbers and ``+`` / ``*`` change a
    formula, ``=`` is tried at each, and formulas longer than
    :data:`EZPOINTS_MAX_FORMULA` take no more characters.
    """
    appendable = [str(n) for n in sorted(set(numbers))] + ["+", "*"]
    frontier: list[tuple[tuple[int | str, ...], list[str]]] = [(tuple(formula), [])]
    seen = {tuple(formula)}
    while frontier:
        next_frontier = []
        for current, words in frontier:
            used = [x for x in current if isinstance(x, int)]
            if len(current) <= EZPOINTS_MAX_FORMULA and ezpoints_reward(current, used) > 0:
                return [*words, "="]
            if len(current) >= EZPOINTS_MAX_FORMULA:
                continue  # one more character would leave no room for "="
            for word in appendable:
                element: int | str = int(word) if word.isdigit() else word
                if isinstance(element, int) and not number_allowed(element, used, numbers):
                    continue
                following = (*current, element)
                if following not in seen:
                    seen.add(following)
                    next_frontier.append((following, [*words, word]))
        frontier = next_frontier
    return None


# ---------------------------------------------------------------------- NumberLine
def numberline_start(seed: int | None,
                     max_position: int = NUMBERLINE_MAX_POSITION) -> tuple[int, int]:
    """(start, target) of NumberLine for ``seed`` (gym-cards' ``reset``)."""
    rng = random.Random(seed)
    start = rng.randint(0, max_position)
    target = rng.randint(0, max_position)
    if start == target:
        target = (target + 1) % max_position
    return start, target


def numberline_reward(before: int, after: int, target: int) -> float:
    """1 on reaching the target, -1 when the distance did not shrink, else 0."""
    distance = abs(after - target)
    if distance == 0:
        return 1.0
    return -1.0 if distance >= abs(before - target) else 0.0


# ---------------------------------------------------------------------- Blackjack
Card = tuple[int, str, str]
"""(value, face, suit): ``(10, "Q", "H")``; an ace is ``(1, "A", suit)``."""


def hand_total(hand: Sequence[Card]) -> int:
    """The hand's total, an ace counting 11 while that does not pass 21."""
    values = [card[0] for card in hand]
    total = sum(values)
    return total + 10 if 1 in values and total + 10 <= 21 else total


def is_bust(hand: Sequence[Card]) -> bool:
    return hand_total(hand) > 21


def blackjack_reward(player: Sequence[Card], dealer: Sequence[Card]) -> float:
    """1 when the player's score beats the dealer's, else 0 (a bust scores 0)."""
    player_score = 0 if is_bust(player) else hand_total(player)
    dealer_score = 0 if is_bust(dealer) else hand_total(dealer)
    return 1.0 if player_score > dealer_score else 0.0


@dataclass
class BlackjackDeck:
    """The infinite deck of one Blackjack episode: Gymnasium's seeded generator for the
    seed, drawn from in gym-cards' order."""

    rng: np.random.Generator

    @classmethod
    def for_seed(cls, seed: int) -> BlackjackDeck:
        return cls(seeding.np_random(seed)[0])

    def draw(self) -> Card:
        value = int(self.rng.choice(BLACKJACK_DECK))
        suit = str(self.rng.choice(["C", "D", "H", "S"]))
        if value == 1:
            face = "A"
        elif value == 10:
            face = str(self.rng.choice(["J", "Q", "K"]))
        else:
            face = str(value)
        return value, face, suit

    def deal(self) -> tuple[list[Card], list[Card]]:
        """The dealer's two cards and the player's two, and gym-cards' two unused draws."""
        dealer = [self.draw(), self.draw()]
        player = [self.draw(), self.draw()]
        self.rng.choice(["C", "D", "H", "S"])  # gym-cards draws a suit it never shows
        if dealer[0][0] == 10:
            self.rng.choice(["J", "Q", "K"])  # and a face for a 10, never shown either
        return dealer, player
