"""WebShop's goals: synthetic and human instructions, price caps, the fixed shuffle and split.

Goals follow WebShop's ``get_synthetic_goals`` / ``get_human_goals``:

* **synthetic** -- one goal per option combination of every product with a synthetic
  instruction: ``"<instruction> with <name>: <value>, and <name2>: <value2>, and price
  lower than X.XX dollars"`` (option names in sorted order, combinations in
  ``itertools.product`` order); goal attributes are the instruction's attributes and the
  goal options the combination's values.
* **human** -- one goal per human instruction that names at least one attribute: the text
  without trailing dots plus the price clause; goal options are the annotated
  ``instruction_options``.

**Purchase prices and caps.** A product's purchase price is its single price, or for a
range a uniform draw in it. A goal's cap takes the first four of 10, 20, ..., 990 dollars
above that price, samples two of them and keeps the larger; with fewer than two the goal
has no cap (1,000,000, no price clause). We draw with a private ``random.Random(seed)``
(never the global RNG) in WebShop's order -- prices in product order, then one cap per
synthetic product or per human instruction -- so the caps equal those of WebShop's text
env seeded with the same value (its copy in verl-agent defaults to 42).

**Split.** All goals of a :class:`GoalTable` are shuffled once with
``random.Random(233).shuffle`` -- the same permutation WebShop's ``random.seed(233);
random.shuffle(goals)`` makes, so for the same data the same goals land in the same split
-- and cut by position: test = the first 500, dev = the next 1,000, train = the rest.
No env seed takes part, so train and test never overlap. Small goal sets (fewer than
``2 × (test + dev)`` goals, where the absolute sizes would leave train with under half)
are split proportionally instead: test and dev take ``floor(10% × n)`` goals each (at
least one each when ``n >= 3``; below that everything is train). See :class:`GoalSplit`.

Goals are stored compactly (a product index and a variant per goal) and materialized on
demand, so 100,000 products with hundreds of thousands of goals stay cheap.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

from agentgym.webshop.data import Catalog, Product

GoalKind = Literal["synthetic", "human"]
GoalSource = Literal["synthetic", "human", "all"]
SplitName = Literal["train", "dev", "test"]
SPLITS: tuple[str, ...] = ("train", "dev", "test")
GOAL_SOURCES: tuple[str, ...] = ("synthetic", "human", "all")

PRICE_CAPS: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
"""WebShop's candidate price caps: 10, 20, ..., 990 dollars."""
NO_PRICE_CAP = 1_000_000.0
"""The cap of goals whose product costs more than 980 dollars (no price clause)."""
GOAL_SHUFFLE_SEED = 233
"""WebShop's fixed seed for the one shuffle of the goal list."""
DEFAULT_PRICE_SEED = 42
"""Seed of purchase prices and price caps (the WebShop text env's default seed)."""


@dataclass(frozen=True)
class Goal:
    """One shopping goal (WebShop's goal dict).

    Attributes:
        goal_id: ``"<asin>-<k>"`` for the k-th option combination of a synthetic goal,
            ``"<asin>-h<k>"`` for the k-th human instruction of a product.
        asin: the target product.
        kind: ``"synthetic"`` or ``"human"``.
        instruction: the instruction text shown to the agent.
        attributes: goal attributes (the reward's attribute part).
        options: goal option values (the reward's option part).
        option_names: the option name of each value (synthetic) or ``None`` (human).
        price_upper: the price cap in dollars.
        name: the target's title (the type reward compares nouns of titles).
        query: the target's scrape query. category: its top category.
        product_category: its category path.
        weight: WebShop's sampling weight (mean inverse attribute frequency; 1 for human).
    """

    goal_id: str
    asin: str
    kind: GoalKind
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    option_names: tuple[str | None, ...]
    price_upper: float
    name: str
    query: str
    category: str
    product_category: str
    weight: float = 1.0


@dataclass(frozen=True)
class GoalSplit:
    """How the shuffled goal list is cut into test, dev and train.

    Attributes:
        test_size: goals in test (the first ones after the shuffle).
        dev_size: goals in dev (the next ones); train is the rest.
        small_set_fraction: share of test and of dev when the set has fewer than
            ``2 * (test_size + dev_size)`` goals.
        shuffle_seed: seed of the one shuffle (WebShop: 233).
    """

    test_size: int = 500
    dev_size: int = 1000
    small_set_fraction: float = 0.1
    shuffle_seed: int = GOAL_SHUFFLE_SEED

    def __post_init__(self) -> None:
        if self.test_size < 0 or self.dev_size < 0:
            raise ValueError("test_size and dev_size must be >= 0")
        if not 0.0 <= self.small_set_fraction < 0.5:
            raise ValueError("small_set_fraction must be in [0, 0.5)")

    def bounds(self, num_goals: int) -> dict[str, range]:
        """Positions (in shuffled order) of each split for ``num_goals`` goals."""
        if num_goals >= 2 * (self.test_size + self.dev_size):
            test, dev = self.test_size, self.dev_size
        elif num_goals >= 3:
            test = dev = max(1, math.floor(self.small_set_fraction * num_goals))
        else:
            test = dev = 0
        return {
            "test": range(0, test),
            "dev": range(test, test + dev),
            "train": range(test + dev, num_goals),
        }


# ---------------------------------------------------------------------------- prices
def purchase_prices(products: Sequence[Product], rng: random.Random) -> np.ndarray:
    """The price paid for each product: its price, or a uniform draw in its range.

    Returns:
        ``float64[len(products)]``. Draws from ``rng`` in product order (WebShop's
        ``generate_product_prices``).
    """
    prices = np.empty(len(products), dtype=np.float64)
    for i, product in enumerate(products):
        if not product.pricing:
            prices[i] = 100.0
        elif len(product.pricing) == 1:
            prices[i] = product.pricing[0]
        else:
            prices[i] = rng.uniform(product.pricing[0], product.pricing[1])
    return prices


def sample_price_cap(price: float, rng: random.Random) -> float:
    """WebShop's cap: the larger of two of the first four of 10..990 above ``price``."""
    candidates = [p for p in PRICE_CAPS if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_CAP
    return max(rng.sample(candidates, 2))


def price_clause(price_upper: float) -> str:
    """``", and price lower than X.XX dollars"``, or ``""`` when there is no cap."""
    if price_upper >= NO_PRICE_CAP:
        return ""
    return f", and price lower than {price_upper:.2f} dollars"


# ---------------------------------------------------------------------------- table
_SYNTHETIC, _HUMAN = 0, 1


class GoalTable:
    """Every goal of a catalog, stored compactly, with its fixed shuffle and split.

    Args:
        catalog: the products and their instructions.
        prices: purchase price of each product (``float64[len(catalog)]``).
        source: which goals: ``"synthetic"``, ``"human"`` or ``"all"`` (synthetic
            goals first, then human, before the shuffle).
        split: how to cut the shuffled list.
        cap_rng_state: state of a ``random.Random`` right after drawing the prices; each
            goal kind draws its caps from its own copy (WebShop draws them right after
            the prices).
    """

    def __init__(
        self,
        catalog: Catalog,
        prices: np.ndarray,
        *,
        source: GoalSource = "synthetic",
        split: GoalSplit | None = None,
        cap_rng_state: object | None = None,
    ):
        if source not in GOAL_SOURCES:
            raise ValueError(f"goals must be one of {GOAL_SOURCES}, got {source!r}")
        self.catalog = catalog
        self.prices = prices
        self.source = source
        self.split = split or GoalSplit()
        self._product_index = {p.asin: i for i, p in enumerate(catalog.products)}
        kinds: list[int] = []
        products: list[int] = []
        variants: list[int] = []
        caps: list[float] = []
        self._first: dict[int, dict[int, tuple[int, int]]] = {_SYNTHETIC: {}, _HUMAN: {}}
        if source in ("synthetic", "all"):
            rng = _rng_from_state(cap_rng_state)
            for pi, product in enumerate(catalog.products):
                if product.asin not in catalog.synthetic_instructions:
                    continue
                count = _num_combinations(product)
                cap = sample_price_cap(float(prices[pi]), rng)
                self._first[_SYNTHETIC][pi] = (len(kinds), count)
                kinds += [_SYNTHETIC] * count
                products += [pi] * count
                variants += range(count)
                caps += [cap] * count
        if source in ("human", "all"):
            rng = _rng_from_state(cap_rng_state)
            for pi, product in enumerate(catalog.products):
                instructions = catalog.human_instructions.get(product.asin, ())
                start = len(kinds)
                for k, instruction in enumerate(instructions):
                    if not instruction.attributes:
                        continue  # WebShop skips human instructions without attributes
                    kinds.append(_HUMAN)
                    products.append(pi)
                    variants.append(k)
                    caps.append(sample_price_cap(float(prices[pi]), rng))
                if len(kinds) > start:
                    self._first[_HUMAN][pi] = (start, len(kinds) - start)
        self._kinds = np.asarray(kinds, dtype=np.int8)
        self._products = np.asarray(products, dtype=np.int32)
        self._variants = np.asarray(variants, dtype=np.int32)
        self._caps = np.asarray(caps, dtype=np.float64)
        order = list(range(len(kinds)))
        random.Random(self.split.shuffle_seed).shuffle(order)
        self._order = np.asarray(order, dtype=np.int64)
        self._position = np.empty_like(self._order)
        self._position[self._order] = np.arange(len(order))
        self._bounds = self.split.bounds(len(order))
        self._attribute_counts = self._count_synthetic_attributes()

    def __len__(self) -> int:
        return len(self._kinds)

    # -------------------------------------------------------------- goals and ids
    def goal(self, index: int) -> Goal:
        """Materialize goal ``index`` (in build order, before the shuffle)."""
        product = self.catalog.products[int(self._products[index])]
        variant = int(self._variants[index])
        cap = float(self._caps[index])
        if self._kinds[index] == _SYNTHETIC:
            instruction = self.catalog.synthetic_instructions[product.asin]
            names = sorted(product.options)
            values = _combination(product, names, variant)
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))
            option_text = f" with {option_text}" if option_text else ""
            attributes = instruction.attributes
            weight = sum(1.0 / self._attribute_counts[a] for a in attributes) / len(attributes)
            return Goal(
                goal_id=f"{product.asin}-{variant}",
                asin=product.asin,
                kind="synthetic",
                instruction=f"{instruction.text}{option_text}{price_clause(cap)}",
                attributes=attributes,
                options=values,
                option_names=tuple(names),
                price_upper=cap,
                name=product.title,
                query=product.query,
                category=product.category,
                product_category=product.product_category,
                weight=weight,
            )
        human = self.catalog.human_instructions[product.asin][variant]
        return Goal(
            goal_id=f"{product.asin}-h{variant}",
            asin=product.asin,
            kind="human",
            instruction=human.text.strip(".") + price_clause(cap),
            attributes=human.attributes,
            options=human.options,
            option_names=(None,) * len(human.options),
            price_upper=cap,
            name=product.title,
            query=product.query,
            category=product.category,
            product_category=product.product_category,
        )

    def goal_id(self, index: int) -> str:
        """The id of goal ``index`` without materializing the goal."""
        asin = self.catalog.products[int(self._products[index])].asin
        tag = "" if self._kinds[index] == _SYNTHETIC else "h"
        return f"{asin}-{tag}{int(self._variants[index])}"

    def index_of(self, goal_id: str) -> int:
        """The index of ``goal_id``.

        Raises:
            KeyError: no goal has that id.
        """
        asin, sep, variant_text = goal_id.rpartition("-")
        kind = _HUMAN if variant_text.startswith("h") else _SYNTHETIC
        variant_text = variant_text[1:] if kind == _HUMAN else variant_text
        pi = self._product_index.get(asin) if sep else None
        entry = self._first[kind].get(pi) if pi is not None else None
        if entry is None or not variant_text.isdigit():
            raise KeyError(goal_id)
        start, count = entry
        if kind == _HUMAN:
            hits = np.nonzero(self._variants[start : start + count] == int(variant_text))[0]
            if len(hits) == 0:
                raise KeyError(goal_id)
            return start + int(hits[0])
        if int(variant_text) >= count:
            raise KeyError(goal_id)
        return start + int(variant_text)

    # -------------------------------------------------------------- splits
    def split_of(self, index: int) -> str:
        """The split (``"train"``, ``"dev"`` or ``"test"``) goal ``index`` belongs to."""
        position = int(self._position[index])
        for name, positions in self._bounds.items():
            if position in positions:
                return name
        raise IndexError(index)

    def split_indices(self, split: SplitName) -> np.ndarray:
        """Goal indices of ``split`` in shuffled order (``int64[n]``)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        positions = self._bounds[split]
        return self._order[positions.start : positions.stop]

    def split_ids(self, split: SplitName) -> SplitGoalIds:
        """The goal ids of ``split``, a lazy sequence in shuffled order."""
        return SplitGoalIds(self, self.split_indices(split))

    def _count_synthetic_attributes(self) -> Mapping[str, int]:
        counts: Counter[str] = Counter()
        for pi, (_, count) in self._first[_SYNTHETIC].items():
            asin = self.catalog.products[pi].asin
            for attribute in self.catalog.synthetic_instructions[asin].attributes:
                counts[attribute] += count
        return counts


class SplitGoalIds(Sequence[str]):
    """A read-only, lazily built sequence of goal ids (one split, shuffled order)."""

    def __init__(self, table: GoalTable, indices: np.ndarray):
        self._table = table
        self._indices = indices

    def __len__(self) -> int:
        return len(self._indices)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._table.goal_id(int(j)) for j in self._indices[i]]
        return self._table.goal_id(int(self._indices[i]))

    def __repr__(self) -> str:
        return f"SplitGoalIds(n={len(self)})"


def _num_combinations(product: Product) -> int:
    return math.prod(len(values) for values in product.options.values())


def _combination(product: Product, names: Sequence[str], variant: int) -> tuple[str, ...]:
    """The ``variant``-th element of ``itertools.product`` over the option values."""
    values = []
    for name in reversed(names):
        choices = product.options[name]
        variant, digit = divmod(variant, len(choices))
        values.append(choices[digit])
    return tuple(reversed(values))


def _rng_from_state(state: object | None) -> random.Random:
    rng = random.Random(DEFAULT_PRICE_SEED)
    if state is not None:
        rng.setstate(state)  # type: ignore[arg-type]
    return rng
