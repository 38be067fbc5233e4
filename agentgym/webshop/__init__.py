"""WebShop (Yao et al., NeurIPS 2022) as a Gymnasium text env: ``AgentGym/WebShop-v0``.

Modules: :mod:`~agentgym.webshop.env` (the env), :mod:`~agentgym.webshop.data` (WebShop's
files and normalization), :mod:`~agentgym.webshop.catalog_gen` (the generated default
catalog), :mod:`~agentgym.webshop.goals` (goals, price caps, the fixed split),
:mod:`~agentgym.webshop.pages` (page text), :mod:`~agentgym.webshop.search` (BM25),
:mod:`~agentgym.webshop.reward` (WebShop's score), :mod:`~agentgym.webshop.nouns` (title
nouns) and :mod:`~agentgym.webshop.shop` (the per-process shared catalog and index).

Importing this package is cheap: the env and its dependencies (bm25s, rapidfuzz, spaCy)
load on first use of :class:`WebShopEnv`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentgym.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]


def __getattr__(name: str) -> Any:
    if name == "WebShopEnv":
        from agentgym.webshop.env import WebShopEnv

        return WebShopEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
