"""Fetch the public Search-R1 data on a machine with internet access.

Usage::

    python -m agentgym.searchqa.download --out DIR                 # everything (tens of GB)
    python -m agentgym.searchqa.download --out DIR --what qa       # questions only (small)
    python -m agentgym.searchqa.download --out DIR --dry-run       # print the plan

What it fetches (all from public HuggingFace dataset repos):

``qa``      Search-R1's training/test parquet (NQ + HotpotQA train; the seven-dataset
            test set) from ``PeterJinGo/nq_hotpotqa_train``, and FlashRAG's JSONL
            evaluation sets (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle)
            from ``RUC-NLPIR/FlashRAG_datasets``;
``corpus``  wiki-18 (``PeterJinGo/wiki-18-corpus``, ~21M passages, ``wiki-18.jsonl.gz``),
            decompressed to ``wiki-18.jsonl`` unless ``--keep-gzip``;
``index``   Search-R1's E5 flat FAISS index (``PeterJinGo/wiki-18-e5-index``, two parts
            concatenated into ``e5_Flat.index``; ~60 GB, needs that much RAM to serve).

Then: ``SearchQAEnv(data_path=DIR/flashrag/nq/test.jsonl, retriever="http://...")`` with
a retrieval server over ``wiki-18.jsonl`` and ``e5_Flat.index`` (E5 encoder), or
``corpus_path=`` a smaller corpus with ``retriever="bm25"``.

This command was written on a machine without internet access and has NOT been run
end to end; the URLs were checked against Search-R1's and FlashRAG's published download
scripts. Downloads go to ``<file>.part`` first and are renamed when complete; existing
files are skipped, so an interrupted run can be restarted (a partial file restarts from
zero; ``huggingface-cli download`` resumes, if you prefer it).
"""

from __future__ import annotations

import gzip
import shutil
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.command_line import OneLineParser

HF = "https://huggingface.co/datasets"
SEARCH_R1_QA = f"{HF}/PeterJinGo/nq_hotpotqa_train/resolve/main"
FLASHRAG = f"{HF}/RUC-NLPIR/FlashRAG_datasets/resolve/main"
WIKI18_CORPUS = f"{HF}/PeterJinGo/wiki-18-corpus/resolve/main/wiki-18.jsonl.gz"
WIKI18_E5_INDEX = f"{HF}/PeterJinGo/wiki-18-e5-index/resolve/main"

FLASHRAG_EVAL_SETS: tuple[tuple[str, str], ...] = (
    ("nq", "test"),
    ("triviaqa", "test"),
    ("popqa", "test"),
    ("hotpotqa", "dev"),
    ("2wikimultihopqa", "dev"),
    ("musique", "dev"),
    ("bamboogle", "test"),
)
"""(dataset, split) pairs of FlashRAG's files that Search-R1 evaluates on."""

WHAT: tuple[str, ...] = ("qa", "corpus", "index")


@dataclass(frozen=True)
class Download:
    """One file to fetch: its URL, where it goes (relative to ``--out``) and its group."""

    url: str
    relative_path: str
    group: str


def plan(what: Sequence[str] = WHAT) -> list[Download]:
    """The downloads for the chosen groups (``"qa"``, ``"corpus"``, ``"index"``)."""
    unknown = set(what) - set(WHAT)
    if unknown:
        raise ValueError(f"unknown groups {sorted(unknown)}; choose from {WHAT}")
    items: list[Download] = []
    if "qa" in what:
        for split in ("train", "test"):
            items.append(
                Download(f"{SEARCH_R1_QA}/{split}.parquet", f"search_r1/{split}.parquet", "qa")
            )
        for name, split in FLASHRAG_EVAL_SETS:
            items.append(
                Download(f"{FLASHRAG}/{name}/{split}.jsonl", f"flashrag/{name}/{split}.jsonl", "qa")
            )
    if "corpus" in what:
        items.append(Download(WIKI18_CORPUS, "wiki-18.jsonl.gz", "corpus"))
    if "index" in what:
        for part in ("part_aa", "part_ab"):
            items.append(Download(f"{WIKI18_E5_INDEX}/{part}", f"e5_index_parts/{part}", "index"))
    return items


def fetch(url: str, target: Path, *, retries: int = 3, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``target`` (via ``target.part``); skip if ``target`` exists."""
    if target.exists():
        print(f"exists, skipped: {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    for attempt in range(1, retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                total = int(response.headers.get("Content-Length") or 0) or None
                with partial.open("wb") as handle, _progress(total, target.name) as bar:
                    while chunk := response.read(1 << 20):
                        handle.write(chunk)
                        bar.update(len(chunk))
            partial.replace(target)
            return target
        except OSError as error:  # URLError and HTTPError are OSErrors
            if attempt == retries:
                raise RuntimeError(
                    f"download of {url} failed after {retries} tries: {error}"
                ) from error
            wait = 2.0**attempt
            print(f"{url}: {error}; retrying in {wait:.0f}s", file=sys.stderr)
            time.sleep(wait)
    raise AssertionError("unreachable")


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *args: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


def _progress(total: int | None, name: str) -> Any:
    """A tqdm byte progress bar, or a silent stand-in without tqdm."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name)


def concatenate(parts: Sequence[Path], target: Path) -> Path:
    """Concatenate ``parts`` byte for byte into ``target`` (via ``target.part``)."""
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as out:
        for part in parts:
            with part.open("rb") as handle:
                shutil.copyfileobj(handle, out, 1 << 24)
    partial.replace(target)
    return target


def gunzip(source: Path, target: Path) -> Path:
    """Decompress ``source`` into ``target`` (via ``target.part``)."""
    partial = target.with_name(target.name + ".part")
    with gzip.open(source, "rb") as handle, partial.open("wb") as out:
        shutil.copyfileobj(handle, out, 1 << 24)
    partial.replace(target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m agentgym.searchqa.download",
        description=(
            "Fetch Search-R1's public QA data, the wiki-18 corpus and its E5 index from "
            "HuggingFace. NOT run end to end where it was written (no internet there); "
            "URLs checked against Search-R1's and FlashRAG's download scripts."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, help="destination folder")
    parser.add_argument(
        "--what",
        default=",".join(WHAT),
        help="comma-separated groups: qa (small), corpus (wiki-18, ~21M passages), index (~60 GB)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, fetch nothing")
    parser.add_argument("--keep-gzip", action="store_true", help="do not decompress wiki-18")
    parser.add_argument("--keep-parts", action="store_true", help="keep the index parts")
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.what.split(",") if g.strip()]
    try:
        downloads = plan(groups)
    except ValueError as error:
        parser.error(str(error))
    for item in downloads:
        print(f"{item.group:7s} {item.url} -> {args.out / item.relative_path}")
    if args.dry_run:
        return 0
    for item in downloads:
        fetch(item.url, args.out / item.relative_path)
    if "corpus" in groups and not args.keep_gzip:
        corpus = args.out / "wiki-18.jsonl"
        if not corpus.exists():
            gunzip(args.out / "wiki-18.jsonl.gz", corpus)
    if "index" in groups:
        index = args.out / "e5_Flat.index"
        parts = [args.out / "e5_index_parts" / p for p in ("part_aa", "part_ab")]
        if not index.exists():
            concatenate(parts, index)
        if not args.keep_parts:
            for part in parts:
                part.unlink(missing_ok=True)
    print(f"done: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
