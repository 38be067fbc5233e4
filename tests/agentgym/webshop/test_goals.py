"""Goals, price caps and the fixed split."""

from __future__ import annotations

import math
import random
from types import MappingProxyType

import numpy as np
import pytest

from agentgym.webshop.catalog_gen import CATEGORIES, generate_catalog
from agentgym.webshop.data import Catalog, HumanInstruction, SyntheticInstruction, load_catalog
from agentgym.webshop.goals import (
    NO_PRICE_CAP,
    GoalSplit,
    GoalTable,
    price_clause,
    purchase_prices,
    sample_price_cap,
)
from tests.agentgym.webshop.helpers import all_combinations, make_product
from tests.conftest import shared_data_path


def small_catalog() -> Catalog:
    shampoo = make_product()
    socks = make_product(
        asin="B000000002", options=MappingProxyType({}), pricing=(985.0,), price_tag="$985.0"
    )
    return Catalog(
        products=(shampoo, socks),
        synthetic_instructions=MappingProxyType(
            {
                shampoo.asin: SyntheticInstruction("Find me tea tree shampoo", ("tea tree",)),
                socks.asin: SyntheticInstruction("Find me socks", ("warm",)),
            }
        ),
        human_instructions=MappingProxyType(
            {
                shampoo.asin: (
                    HumanInstruction("i need shampoo.", ("tea tree",), ("mint",)),
                    HumanInstruction("no attributes", (), ()),
                )
            }
        ),
        source="test",
    )


def table(catalog: Catalog, source: str = "synthetic", split: GoalSplit | None = None):
    rng = random.Random(42)
    prices = purchase_prices(catalog.products, rng)
    return GoalTable(catalog, prices, source=source, split=split, cap_rng_state=rng.getstate())


def test_synthetic_goals_one_per_option_combination():
    goals = table(small_catalog())
    assert len(goals) == 4 + 1  # 2 sizes x 2 scents, plus the product without options
    first = goals.goal(goals.index_of("B000000001-0"))
    # option names sorted (scent < size); itertools.product order: the last varies fastest
    assert first.option_names == ("scent", "size")
    assert first.options == ("mint", "8 fl oz")
    assert goals.goal(goals.index_of("B000000001-1")).options == ("mint", "16 fl oz")
    assert first.instruction.startswith(
        "Find me tea tree shampoo with scent: mint, and size: 8 fl oz, and price lower than "
    )
    assert [g for g in all_combinations(make_product())][1] == ("mint", "16 fl oz")
    socks = goals.goal(goals.index_of("B000000002-0"))
    assert socks.options == () and socks.price_upper == NO_PRICE_CAP
    assert socks.instruction == "Find me socks"  # no options, no cap above $980


def test_human_goals_skip_instructions_without_attributes():
    goals = table(small_catalog(), source="human")
    assert len(goals) == 1
    goal = goals.goal(0)
    assert goal.goal_id == "B000000001-h0" and goal.kind == "human"
    assert goal.instruction.startswith("i need shampoo, and price lower than ")
    assert goal.options == ("mint",) and goal.weight == 1.0
    with pytest.raises(KeyError):
        goals.index_of("B000000001-h1")


def test_price_cap_rule():
    rng = random.Random(0)
    caps = {sample_price_cap(12.5, rng) for _ in range(200)}
    assert caps == {30.0, 40.0, 50.0}  # the larger of two of 20, 30, 40, 50
    assert sample_price_cap(975.0, rng) == 990.0  # candidates 980, 990
    assert sample_price_cap(985.0, rng) == NO_PRICE_CAP  # one candidate only
    assert price_clause(30.0) == ", and price lower than 30.00 dollars"
    assert price_clause(NO_PRICE_CAP) == ""


def test_price_of_a_range_is_drawn_inside_it():
    catalog = generate_catalog(200, seed=3)
    prices = purchase_prices(catalog.products, random.Random(1))
    for product, price in zip(catalog.products, prices, strict=True):
        assert product.pricing[0] <= price <= product.pricing[-1]


def test_split_bounds_absolute_and_small():
    split = GoalSplit()
    bounds = split.bounds(6910)
    assert (bounds["test"], bounds["dev"], bounds["train"]) == (
        range(0, 500), range(500, 1500), range(1500, 6910),
    )  # fmt: skip
    small = split.bounds(13)  # < 3000: 10% each, at least one
    assert (len(small["test"]), len(small["dev"]), len(small["train"])) == (1, 1, 11)
    assert len(split.bounds(2999)["test"]) == 299
    assert [len(r) for r in split.bounds(2).values()] == [0, 0, 2]


def test_shuffle_is_python_random_233():
    goals = table(generate_catalog(300, seed=1))
    order = list(range(len(goals)))
    random.Random(233).shuffle(order)
    test_ids = list(goals.split_ids("test"))
    assert test_ids == [goals.goal_id(i) for i in order[: len(test_ids)]]


def test_splits_partition_the_goals():
    goals = table(generate_catalog(1000, seed=0))
    ids = {name: set(goals.split_ids(name)) for name in ("train", "dev", "test")}
    assert len(ids["test"]) == 500 and len(ids["dev"]) == 1000
    assert not (ids["train"] & ids["test"]) and not (ids["train"] & ids["dev"])
    assert not (ids["dev"] & ids["test"])
    assert sum(len(v) for v in ids.values()) == len(goals)
    for goal_id in list(ids["test"])[:50]:
        assert goals.split_of(goals.index_of(goal_id)) == "test"


def test_goal_ids_round_trip():
    goals = table(generate_catalog(100, seed=2), source="all")
    for index in range(len(goals)):
        assert goals.index_of(goals.goal_id(index)) == index
        assert goals.goal(index).goal_id == goals.goal_id(index)
    for bad in ("nonsense", "G000000000-0", "-1", goals.goal_id(0) + "9999"):
        with pytest.raises(KeyError):
            goals.index_of(bad)


def test_generated_catalog_meets_its_targets():
    catalog = generate_catalog()
    assert len(catalog) == 1000
    assert {p.category for p in catalog.products} == set(CATEGORIES)
    assert len(table(catalog)) >= 3000  # enough for the absolute split
    for product in catalog.products:
        assert len(product.attributes) >= 3 and product.title and product.bullet_points
        values = [v for vs in product.options.values() for v in vs]
        assert len(values) == len(set(values))  # option values never repeat in a product
        text = product.search_text()
        assert all(a in text or a in " ".join(product.bullet_points).lower()
                   for a in product.attributes)  # fmt: skip
        instruction = catalog.synthetic_instructions.get(product.asin)
        if instruction:
            assert set(instruction.attributes) <= set(product.attributes)


def test_generated_catalog_is_deterministic():
    a, b = generate_catalog(300, seed=7), generate_catalog(300, seed=7)
    assert a.products == b.products
    assert dict(a.synthetic_instructions) == dict(b.synthetic_instructions)
    assert generate_catalog(300, seed=8).products != a.products


def test_goal_weights_are_mean_inverse_attribute_counts():
    catalog = small_catalog()
    goals = table(catalog)
    # "tea tree" appears in 4 goals (one product, 4 combinations), "warm" in 1
    assert goals.goal(0).weight == pytest.approx(1 / 4)
    assert goals.goal(goals.index_of("B000000002-0")).weight == pytest.approx(1.0)


@pytest.mark.data
def test_shared_data_goal_counts():
    catalog = load_catalog(shared_data_path("webshop"))
    expected = sum(
        math.prod(len(v) for v in p.options.values())
        for p in catalog.products
        if p.asin in catalog.synthetic_instructions
    )
    synthetic = table(catalog)
    assert len(synthetic) == expected == 6910
    assert len(table(catalog, "human")) == 13
    assert np.all(synthetic._caps > synthetic.prices[synthetic._products])
