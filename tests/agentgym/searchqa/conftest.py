"""Shared fixtures of the Search-QA tests: the generated knowledge base and a test retriever."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.searchqa.knowledge_base import KnowledgeBase, generate_knowledge_base
from tests.agentgym.searchqa.overlap_retriever import OverlapRetriever


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return generate_knowledge_base(0)


@pytest.fixture(scope="session")
def kb_retriever(kb: KnowledgeBase) -> OverlapRetriever:
    return OverlapRetriever(kb.passages)


@pytest.fixture(autouse=True)
def isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point ``$AGENTGYM_CACHE`` at a per-session temporary folder (never ``~/.cache``)."""
    root = tmp_path_factory.getbasetemp() / "agentgym-cache"
    monkeypatch.setenv("AGENTGYM_CACHE", str(root))
    return root
