"""Fixtures shared by the tests under ``tests/algorithms``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory) -> Path:
    """The tiny Llama and its tokenizer saved as an HF folder (``--model.name-or-path``)."""
    from tests.algorithms.tiny import make_policy

    folder = tmp_path_factory.mktemp("tiny-model")
    policy = make_policy()
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    return folder
