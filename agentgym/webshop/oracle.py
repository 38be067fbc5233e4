"""A privileged expert for WebShop: it reads the goal and shops for the target.

It searches the goal's instruction, pages through the results until the target appears,
opens it, clicks each goal option and buys. For synthetic goals the options are the
product's own values; for human goals each annotated option is mapped to the product's
value with the highest fuzzy score (as the reward compares them). Useful as a sanity
check of data, search and reward (tests and the benchmark use it), and to record
demonstrations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentgym.webshop import pages
from agentgym.webshop.reward import fuzzy_ratio, normalize_color

if TYPE_CHECKING:  # annotations only: the env imports this module for its expert
    from agentgym.webshop.env import WebShopEnv


def oracle_option_values(env: WebShopEnv) -> dict[str, str]:
    """Option name -> value the oracle picks for the current goal's target."""
    goal = env.goal
    if goal is None:
        raise RuntimeError("reset the env first")
    product = env.shop.product(goal.asin)
    picks: dict[str, str] = {}
    for name, wanted in zip(goal.option_names, goal.options, strict=True):
        if name is not None and wanted in product.options.get(name, ()):
            picks[name] = wanted
            continue
        best = None
        for option_name, values in product.options.items():
            for value in values:
                score = fuzzy_ratio(normalize_color(value), normalize_color(wanted))
                if best is None or score > best[0]:
                    best = (score, option_name, value)
        if best is not None:
            picks[best[1]] = best[2]
    return picks


_RESULTS_BUTTONS = frozenset(
    b.lower() for b in (pages.BACK_TO_SEARCH, pages.PREV_PAGE, pages.NEXT_PAGE)
)


def oracle_action(env: WebShopEnv) -> str | None:
    """The expert's next action, or ``None`` when it cannot reach the target."""
    goal = env.goal
    if goal is None:
        raise RuntimeError("reset the env first")
    page = env.page
    target = goal.asin.lower()
    if page.kind == "search":
        return f"search[{goal.instruction}]"
    if page.kind == "results":
        if target in page.clickables:
            return f"click[{target}]"
        shows_products = any(c not in _RESULTS_BUTTONS for c in page.clickables)
        if shows_products and pages.NEXT_PAGE.lower() in page.clickables:
            return f"click[{pages.NEXT_PAGE.lower()}]"
        return None  # past the last hits (WebShop shows "Next >" there too)
    if page.kind == "sub_page":
        return f"click[{pages.PREV_PAGE.lower()}]"
    if page.kind == "item":
        if env.current_asin != goal.asin:
            return f"click[{pages.PREV_PAGE.lower()}]"
        for name, value in oracle_option_values(env).items():
            if env.selected_options.get(name) != value:
                return f"click[{value}]"
        return f"click[{pages.BUY_NOW.lower()}]"
    return None


def run_oracle(env: WebShopEnv, task_id: str, *, max_steps: int = 30) -> tuple[float, list[str]]:
    """Play ``task_id`` with the oracle; return the score (0 if it never buys) and actions."""
    env.reset(options={"task_id": task_id})
    actions: list[str] = []
    for _ in range(max_steps):
        action = oracle_action(env)
        if action is None:
            break
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        if terminated:
            return float(info["score"]), actions
        if truncated:
            break
    return 0.0, actions
