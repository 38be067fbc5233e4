"""The pictures of gym-cards' games, laid out as gym-cards lays them out, with card faces
drawn by our own code (Pillow, the ``vision`` extra).

Layouts (300 x 300 RGB, as gym-cards' ``_get_observation`` / ``_get_obs``):

* **EZPoints**: table green ``#35654d``; the two cards 135 x 189 at (5, 55) and (153, 55);
  ``"Formula: "`` and the formula's characters joined by spaces, white, DejaVu Sans 20 at
  (10, 258).
* **NumberLine**: white; ``"Target: <n>"`` at (30, 60) and ``"Current: <n>"`` at (30, 180),
  black, DejaVu Sans Bold 36.
* **Blackjack**: table green; ``"Dealer"`` at (5, 5), the dealer's first card face up at
  (5, 25) and a card back at (78, 25); ``"Player"`` at (5, 130) and the player's cards
  from (5, 150), 74 px apart, five to a row (the next row 102 px lower, cut by the frame's
  edge); cards 70 x 98; labels white, DejaVu Sans Bold 16.

Fonts: DejaVu Sans / Sans Bold, looked up by file name in the system's font folders as
gym-cards does (Debian: ``fonts-dejavu-core``); where they are missing, Pillow's built-in
font of the same size (gym-cards itself fails there), so the text's glyphs differ.

Card faces (:class:`CardFaces`): ours are a white card with rounded corners on the table
green, a thin grey edge, the rank and a suit symbol in the top-left corner and again
upside down in the bottom-right, and the rank written large in the middle above a large
suit symbol (red hearts and diamonds, black spades and clubs); ``T`` is written ``10``;
no pips, no court portraits; the back is blue with a white border and a diamond lattice.
gym-cards' faces are a standard deck's pictures (pips, portraits, a patterned back).
``CardFaces(directory)`` reads gym-cards' own card files from a checkout's
``gym_cards/envs/img`` folder instead, and the frames are then pixel for pixel gym-cards'.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from agentgym.images import require_pillow

FRAME = 300
TABLE_GREEN = "#35654d"
EZPOINTS_FONT = ("DejaVuSans.ttf", 20)
NUMBERLINE_FONT = ("DejaVuSans-Bold.ttf", 36)
BLACKJACK_FONT = ("DejaVuSans-Bold.ttf", 16)
BLACKJACK_CARD = (70, 98)
BACK = "card"
"""The name of the card back (gym-cards' ``card.png``)."""

_RED, _BLACK = (196, 28, 36), (24, 24, 24)
_BACK_BLUE, _LATTICE = (38, 64, 150), (92, 122, 204)
_SUPERSAMPLE = 4


@functools.cache
def font(name: str, size: int) -> Any:
    """The TrueType font file ``name`` from the system's font folders at ``size`` px, or
    Pillow's built-in font at that size when it is not installed."""
    image_font = require_pillow().ImageFont
    try:
        return image_font.truetype(name, size)
    except OSError:
        return image_font.load_default(size)


def _is_red(suit: str) -> bool:
    return suit in ("H", "D")


def _suit_symbol(draw: Any, suit: str, cx: float, cy: float, size: float) -> None:
    """A suit symbol of height ``size`` centred at (cx, cy)."""
    colour = _RED if _is_red(suit) else _BLACK
    h = size / 2
    if suit == "D":
        draw.polygon([(cx, cy - h), (cx + 0.72 * h, cy), (cx, cy + h), (cx - 0.72 * h, cy)],
                     fill=colour)
        return
    r = 0.5 * h
    if suit == "H":
        for dx in (-r, r):
            draw.ellipse([cx + dx - r, cy - h, cx + dx + r, cy - h + 2 * r], fill=colour)
        draw.polygon([(cx - 2 * r, cy - h + r), (cx + 2 * r, cy - h + r), (cx, cy + h)],
                     fill=colour)
        return
    if suit == "S":
        for dx in (-r, r):
            draw.ellipse([cx + dx - r, cy + 0.35 * h - r, cx + dx + r, cy + 0.35 * h + r],
                         fill=colour)
        draw.polygon([(cx - 2 * r, cy + 0.35 * h), (cx + 2 * r, cy + 0.35 * h), (cx, cy - h)],
                     fill=colour)
    else:  # clubs
        r = 0.44 * h
        for dx, dy in ((0, -h + r), (-1.05 * r, -h + 2.6 * r), (1.05 * r, -h + 2.6 * r)):
            draw.ellipse([cx + dx - r, cy + dy - r, cx + dx + r, cy + dy + r], fill=colour)
    draw.polygon([(cx, cy + 0.1 * h), (cx - 0.45 * h, cy + h), (cx + 0.45 * h, cy + h)],
                 fill=colour)  # the stem of spades and clubs


def _rank_text(rank: str) -> str:
    return "10" if rank == "T" else rank


def _blank_card(pil: SimpleNamespace, width: int, height: int, fill: Any) -> tuple[Any, Any]:
    """A rounded card of ``fill`` with a grey edge on the table green, drawn large."""
    card = pil.Image.new("RGB", (width, height), TABLE_GREEN)
    draw = pil.ImageDraw.Draw(card)
    radius = max(2, round(0.07 * width))
    edge = max(1, round(0.012 * width))
    draw.rounded_rectangle([0, 0, width - 1, height - 1], radius=radius, fill=fill,
                           outline=(150, 150, 150), width=edge)
    return card, draw


def draw_card(name: str, width: int, height: int) -> Any:
    """Our picture of card ``name`` (suit + rank: ``"H7"``, ``"DT"``, ``"SK"``; or
    :data:`BACK`) as an RGB Pillow image of ``width`` x ``height``."""
    pil = require_pillow()
    big_w, big_h = width * _SUPERSAMPLE, height * _SUPERSAMPLE
    if name == BACK:
        card, draw = _blank_card(pil, big_w, big_h, "white")
        inset = round(0.08 * big_w)
        draw.rounded_rectangle([inset, inset, big_w - 1 - inset, big_h - 1 - inset],
                               radius=round(0.04 * big_w), fill=_BACK_BLUE)
        step = max(4, round(0.14 * big_w))
        line = max(1, round(0.015 * big_w))
        for offset in range(-big_h, big_w + big_h, step):
            draw.line([(offset, inset), (offset + big_h, inset + big_h)], fill=_LATTICE,
                      width=line)
            draw.line([(offset, inset + big_h), (offset + big_h, inset)], fill=_LATTICE,
                      width=line)
        border = pil.Image.new("L", (big_w, big_h), 0)
        pil.ImageDraw.Draw(border).rounded_rectangle(
            [inset, inset, big_w - 1 - inset, big_h - 1 - inset], radius=round(0.04 * big_w),
            fill=255)
        plain, _ = _blank_card(pil, big_w, big_h, "white")
        card = pil.Image.composite(card, plain, border)  # the lattice stays inside
        return card.resize((width, height), pil.Image.LANCZOS)
    suit, rank = name[0], _rank_text(name[1:])
    if len(name) != 2 or suit not in "HSDC" or name[1] not in "A23456789TJQK":
        raise ValueError(f"not a card name: {name!r} (suit H/S/D/C + rank A, 2-9, T, J, Q, K)")
    card, draw = _blank_card(pil, big_w, big_h, "white")
    colour = _RED if _is_red(suit) else _BLACK
    index = pil.Image.new("RGBA", (big_w, big_h), (0, 0, 0, 0))  # the top-left index
    index_draw = pil.ImageDraw.Draw(index)
    pad, index_size = round(0.07 * big_w), round(0.17 * big_w)
    index_draw.text((pad + index_size / 2, pad), rank, fill=colour, anchor="mt",
                    font=font("DejaVuSans-Bold.ttf", max(4, index_size)))
    _suit_symbol(index_draw, suit, pad + index_size / 2, pad + 1.75 * index_size,
                 0.9 * index_size)
    card = pil.Image.alpha_composite(card.convert("RGBA"), index)
    card = pil.Image.alpha_composite(card, index.rotate(180)).convert("RGB")
    draw = pil.ImageDraw.Draw(card)
    draw.text((big_w / 2, 0.40 * big_h), rank, fill=colour, anchor="mm",
              font=font("DejaVuSans-Bold.ttf", max(6, round(0.36 * big_w))))
    _suit_symbol(draw, suit, big_w / 2, 0.66 * big_h, 0.26 * big_w)
    return card.resize((width, height), pil.Image.LANCZOS)


class CardFaces:
    """Where card pictures come from: our drawing (``directory=None``) or gym-cards' own
    files (``<name>.png`` in ``directory``, its ``gym_cards/envs/img`` folder), resized as
    gym-cards resizes them. Pictures are cached per name and size.

    Raises:
        FileNotFoundError: ``directory`` is given but is not a folder (at construction), or
            lacks a card's file (when it is first drawn).
    """

    def __init__(self, directory: str | Path | None = None):
        self.directory = None if directory is None else Path(directory)
        if self.directory is not None and not self.directory.is_dir():
            raise FileNotFoundError(f"card_images={str(directory)!r} is not a folder (expected "
                                    "a gym-cards checkout's gym_cards/envs/img)")
        self._cache: dict[tuple[str, int, int], Any] = {}

    def picture(self, name: str, width: int, height: int) -> Any:
        """Card ``name`` as a Pillow image of ``width`` x ``height``."""
        key = (name, width, height)
        if key not in self._cache:
            self._cache[key] = self._make(name, width, height)
        return self._cache[key]

    def _make(self, name: str, width: int, height: int) -> Any:
        if self.directory is None:
            return draw_card(name, width, height)
        path = self.directory / f"{name}.png"
        if not path.is_file():
            raise FileNotFoundError(f"no card picture {path}")
        with require_pillow().Image.open(path) as original:
            return original.resize((width, height))  # gym-cards' resize (Pillow's default)


def _table(background: str) -> tuple[Any, Any]:
    pil = require_pillow()
    canvas = pil.Image.new("RGB", (FRAME, FRAME), background)
    return canvas, pil.ImageDraw.Draw(canvas)


def ezpoints_frame(cards: Sequence[str], formula_spaced: str, faces: CardFaces) -> np.ndarray:
    """EZPoints' picture: the cards and ``"Formula: " + formula_spaced``."""
    canvas, draw = _table(TABLE_GREEN)
    width = int(FRAME / len(cards) * 0.9)
    height = int(width * 7 / 5)
    for i, name in enumerate(cards):
        picture = faces.picture(name, width, height)
        canvas.paste(picture, (5 + int(i * picture.width * 1.1),
                               int((FRAME - picture.height) / 2)))
    draw.text((10, FRAME * 0.86), f"Formula: {formula_spaced}", fill="white",
              font=font(*EZPOINTS_FONT))
    return np.array(canvas)


def numberline_frame(target: int, current: int) -> np.ndarray:
    """NumberLine's picture: the target and the current number."""
    canvas, draw = _table("white")
    draw.text((30, 60), f"Target: {target}", fill="black", font=font(*NUMBERLINE_FONT))
    draw.text((30, 180), f"Current: {current}", fill="black", font=font(*NUMBERLINE_FONT))
    return np.array(canvas)


def blackjack_frame(dealer_up: str, player: Sequence[str], faces: CardFaces) -> np.ndarray:
    """Blackjack's picture: the dealer's face-up card and a back, the player's cards."""
    canvas, draw = _table(TABLE_GREEN)
    label = font(*BLACKJACK_FONT)
    draw.text((5, 5), "Dealer", fill="white", font=label)
    canvas.paste(faces.picture(dealer_up, *BLACKJACK_CARD), (5, 25))
    canvas.paste(faces.picture(BACK, *BLACKJACK_CARD), (78, 25))
    draw.text((5, 130), "Player", fill="white", font=label)
    x, y = 5, 150
    for index, name in enumerate(player):
        picture = faces.picture(name, *BLACKJACK_CARD)
        canvas.paste(picture, (x, y))
        x += picture.width + 4
        if index == 4:
            y += picture.height + 4
            x = 5
    return np.array(canvas)

