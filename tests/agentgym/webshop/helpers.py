"""Small hand-made products and goals for WebShop tests."""

from __future__ import annotations

import itertools
from types import MappingProxyType

from agentgym.webshop.data import Product
from agentgym.webshop.goals import Goal


def make_product(**overrides) -> Product:
    fields = dict(
        asin="B000000001",
        title="Acme Tea Tree Shampoo for Dry Hair",
        description="A gentle shampoo with natural ingredients.",
        bullet_points=("Sulfate free formula", "Made in USA"),
        pricing=(12.5,),
        price_tag="$12.5",
        options=MappingProxyType({"size": ("8 fl oz", "16 fl oz"), "scent": ("mint", "rose")}),
        attributes=("tea tree", "dry hair", "paraben free"),
        category="beauty",
        query="shampoo",
        product_category="Beauty & Personal Care › Hair Care › Shampoo",
    )
    fields.update(overrides)
    return Product(**fields)


def make_goal(**overrides) -> Goal:
    fields = dict(
        goal_id="B000000001-0",
        asin="B000000001",
        kind="synthetic",
        instruction="Find me tea tree shampoo",
        attributes=("tea tree", "dry hair"),
        options=("16 fl oz", "mint"),
        option_names=("size", "scent"),
        price_upper=20.0,
        name="Acme Tea Tree Shampoo for Dry Hair",
        query="shampoo",
        category="beauty",
        product_category="Beauty & Personal Care › Hair Care › Shampoo",
    )
    fields.update(overrides)
    return Goal(**fields)


def split_nouns(text: str) -> tuple[str, ...]:
    """A deterministic stand-in for spaCy: every lowercased word is a noun."""
    return tuple(text.lower().split())


def all_combinations(product: Product) -> list[tuple[str, ...]]:
    """Every option combination of ``product`` in goal order (option names sorted, the
    last varying fastest): the ``itertools.product`` reference for the goal table's own
    arithmetic."""
    names = sorted(product.options)
    return list(itertools.product(*(product.options[n] for n in names)))
