"""``benchmarks/gpu_paths.sh``'s model builder: the Python it feeds to the interpreter
(a stale import in it went unseen until a lent GPU machine ran the script)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_paths_builds_its_word_level_model(tmp_path):
    script = (ROOT / "benchmarks" / "gpu_paths.sh").read_text(encoding="utf-8")
    builder = re.search(r"<<'PYTHON' \|\| exit 1\n(.*?)\nPYTHON\n", script, re.S).group(1)
    subprocess.run([sys.executable, "-", str(tmp_path)], input=builder, text=True,
                   cwd=ROOT, check=True, timeout=120)
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert (config.hidden_size, config.num_hidden_layers) == (256, 4)
    assert config.vocab_size == len(tokenizer) and len(tokenizer) > 50
    assert tokenizer.tokenize("go north</action>") == ["go", "north", "</action>"]
