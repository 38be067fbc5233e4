"""Which tasks an evaluation or an SFT stage plays (algorithms.agent.task_choice)."""

from __future__ import annotations

import pytest

from algorithms.agent.task_choice import choose_task_ids

IDS = [f"t{i}" for i in range(10)]


def test_first_takes_the_front_and_spread_one_every_n_over_count():
    assert choose_task_ids(IDS, 3, "first") == ["t0", "t1", "t2"]
    # positions floor(i * 10 / 3) = 0, 3, 6
    assert choose_task_ids(IDS, 3, "spread") == ["t0", "t3", "t6"]
    assert choose_task_ids(IDS, 4, "spread") == ["t0", "t2", "t5", "t7"]
    assert choose_task_ids(IDS, 0, "spread") == []


@pytest.mark.parametrize("order", ["first", "spread"])
@pytest.mark.parametrize("count", [1, 2, 5, 9, 10, 11])
def test_the_choice_is_count_distinct_ids_in_the_lists_order(order, count):
    chosen = choose_task_ids(IDS, count, order)
    assert len(chosen) == min(count, len(IDS)) == len(set(chosen))
    assert chosen == sorted(chosen, key=IDS.index)
    if count >= len(IDS):
        assert chosen == IDS


def test_a_grouped_list_is_covered_by_spread_not_by_first():
    grouped = [f"{kind}-{i}" for kind in "abcd" for i in range(25)]
    kinds = {order: {t.split("-")[0] for t in choose_task_ids(grouped, 8, order)}
             for order in ("first", "spread")}
    assert kinds == {"first": {"a"}, "spread": set("abcd")}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="task order"):
        choose_task_ids(IDS, 2, "random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count"):
        choose_task_ids(IDS, -1)
