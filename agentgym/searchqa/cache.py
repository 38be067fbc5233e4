"""Where Search-QA keeps what it builds: the generated knowledge base and retrieval indexes.

Layout under the cache directory (``$AGENTGYM_CACHE/searchqa``, else
``~/.cache/agentgym/searchqa``)::

    kb-v1-seed0/corpus.jsonl        generated passages, {"id", "contents"} per line
    kb-v1-seed0/qa.jsonl            generated questions, FlashRAG-style rows
    indexes/bm25-<corpus key>/      a BM25 index over one corpus
    indexes/dense-<encoder>-<corpus key>/

A corpus key hashes the corpus file's absolute path, size and modification time, so an
edited corpus gets a new index. Files and index folders are written under a temporary
name and renamed into place, so concurrent env workers never read half-written files
(two workers racing on a first build both build; one result wins).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentgym.searchqa.data import write_qa_jsonl
from agentgym.searchqa.knowledge_base import KB_VERSION, generate_knowledge_base

CACHE_ENV_VAR = "AGENTGYM_CACHE"
"""Environment variable naming AgentGym's cache root (Search-QA uses ``<root>/searchqa``)."""


def default_cache_dir() -> Path:
    """``$AGENTGYM_CACHE/searchqa`` if the variable is set, else ``~/.cache/agentgym/searchqa``."""
    root = os.environ.get(CACHE_ENV_VAR)
    base = Path(root) if root else Path.home() / ".cache" / "agentgym"
    return base / "searchqa"


@dataclass(frozen=True)
class KnowledgeBaseFiles:
    """The files of a generated knowledge base in the cache."""

    directory: Path
    corpus_path: Path
    qa_path: Path


def knowledge_base_files(seed: int, cache_dir: str | Path | None = None) -> KnowledgeBaseFiles:
    """Paths of the knowledge base for ``seed``, generating and writing it if absent."""
    directory = Path(cache_dir or default_cache_dir()) / f"kb-v{KB_VERSION}-seed{seed}"
    files = KnowledgeBaseFiles(directory, directory / "corpus.jsonl", directory / "qa.jsonl")
    if files.corpus_path.is_file() and files.qa_path.is_file():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    kb = generate_knowledge_base(seed)

    def write_corpus(path: Path) -> None:
        with path.open("w", encoding="utf-8") as handle:
            for document in kb.passages:
                handle.write(json.dumps(document.to_json(), ensure_ascii=False) + "\n")

    _write_atomically(files.corpus_path, write_corpus)
    _write_atomically(files.qa_path, lambda path: write_qa_jsonl(kb.questions, path))
    return files


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def corpus_key(corpus_path: str | Path) -> str:
    """A short hash of the corpus file's absolute path, size and modification time."""
    path = Path(corpus_path).resolve()
    stat = path.stat()
    text = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def index_dir(kind: str, corpus_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The cache folder of a ``kind`` index (``"bm25"``, ``"dense-<encoder>"``) over a corpus."""
    safe_kind = re.sub(r"[^A-Za-z0-9._-]+", "_", kind)
    root = Path(cache_dir or default_cache_dir()) / "indexes"
    return root / f"{safe_kind}-{corpus_key(corpus_path)}"


def build_directory_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp_dir)`` and rename the result to ``target`` (kept if it appeared meanwhile)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        build(temporary)
        try:
            os.rename(temporary, target)
        except OSError:
            if not target.is_dir():
                raise
            # Another worker finished first: keep its index, drop ours.
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)
    return target
